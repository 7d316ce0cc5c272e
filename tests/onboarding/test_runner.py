"""A whole attempt against the fake supplier services: the happy path and the failure paths."""

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Count

from notifications.models import Notification
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, RunAttempt, StepReceipt, VendorRecord
from onboarding.runner import claim_attempt, run_onboarding
from onboarding.steps import idempotency_key
from onboarding.steps.builtin import STEP_NAMES
from onboarding.testing.numbers import german_vat_number
from tests.factories import OnboardingRunFactory, SupplierFactory

pytestmark = pytest.mark.django_db


def attempt(run, **options):
    # background=False: these tests hold the test transaction, so a heartbeat thread must not write.
    return run_onboarding(run.pk, background=False, **options)


def test_run__completes_all_six_steps_with_receipts_and_domain_rows(fake_services):
    run = OnboardingRunFactory()
    assert attempt(run) == "completed"

    run.refresh_from_db()
    assert (run.status, run.phase, run.owner, run.lease_expires_at, run.fence) == (
        "completed",
        "send_welcome_notification",
        None,
        None,
        1,
    )
    receipts = list(StepReceipt.objects.filter(run=run).values_list("step", "fence"))
    assert receipts == [(name, 1) for name in STEP_NAMES]
    supplier = run.supplier
    assert VendorRecord.objects.get(supplier=supplier).fence == 1
    assert PaymentTerms.objects.get(supplier=supplier).currency == "EUR"
    assert BankAccount.objects.get(supplier=supplier).last4 == supplier.iban[-4:]
    welcome = Notification.objects.get(device_token=supplier.device_token)
    assert welcome.data == {"supplier_id": supplier.pk, "onboarding_run_id": run.pk}
    assert list(RunAttempt.objects.filter(run=run).values_list("outcome", flat=True)) == ["completed"]

    stats = fake_services.stats()
    assert stats["requests"] == stats["unique_keys"] == 3
    assert set(stats["keys"]) == {
        idempotency_key(run.pk, step) for step in ("verify_tax_id", "screen_sanctions", "register_bank_account")
    }


def test_run__invalid_tax_id_fails_the_run_with_the_reason(fake_services):
    supplier = SupplierFactory(tax_id=german_vat_number(9090))  # well-formed: the registry just does not know it
    fake_services.config.invalid_tax_ids = [supplier.tax_id]
    run = OnboardingRunFactory(supplier=supplier)

    assert attempt(run) == "failed"

    run.refresh_from_db()
    assert run.status == "failed" and run.owner is None
    assert (
        run.reason
        == f"verify_tax_id: Tax id {supplier.tax_id} (DE) is invalid: tax id {supplier.tax_id} is not registered."
    )
    assert (run.failed_step, run.failure_fixable) == ("verify_tax_id", True)
    assert not StepReceipt.objects.filter(run=run).exists()
    only = RunAttempt.objects.get(run=run)
    assert (only.outcome, only.reason) == ("failed", run.reason)


def test_run__sanctions_hit_fails_after_the_tax_check(fake_services):
    supplier = SupplierFactory(legal_name="Shady Exports Ltd")
    fake_services.config.sanctioned_names = ["shady exports ltd"]
    run = OnboardingRunFactory(supplier=supplier)

    assert attempt(run) == "failed"

    run.refresh_from_db()
    assert run.status == "failed" and "Sanctions screening hit" in run.reason
    assert list(StepReceipt.objects.filter(run=run).values_list("step", flat=True)) == ["verify_tax_id"]
    assert not VendorRecord.objects.filter(supplier=supplier).exists()


def test_run__bank_account_the_service_refuses_is_a_permanent_failure(fake_services):
    supplier = SupplierFactory()
    fake_services.config.refused_ibans = [supplier.iban]  # well-formed, but the bank says no
    run = OnboardingRunFactory(supplier=supplier)
    assert attempt(run) == "failed"
    run.refresh_from_db()
    assert "register_bank_account" in run.reason and "Bank account refused" in run.reason
    assert (run.phase, run.failed_step, run.failure_fixable) == ("set_payment_terms", "register_bank_account", True)
    assert not BankAccount.objects.exists()


def test_run__a_malformed_iban_edited_in_behind_the_form_never_reaches_the_service(fake_services):
    supplier = SupplierFactory()
    run = OnboardingRunFactory(supplier=supplier)
    type(supplier).objects.filter(pk=supplier.pk).update(iban="DE12")  # as from a shell, past validation
    assert attempt(run) == "failed"
    run.refresh_from_db()
    assert "register_bank_account" in run.reason and "IBAN 'DE12' is not valid" in run.reason
    assert fake_services.stats()["endpoints"]["/bank-accounts"]["requests"] == 0
    assert not BankAccount.objects.exists()


@pytest.mark.parametrize("fault", ["error_rate", "throttle_rate"])
def test_run__temporary_failures_release_the_run_without_failing_it(fake_services, settings, fault, clock):
    # Lease time on the fake clock: the due time is a literal, so "not before then" cannot race real time.
    setattr(fake_services.config, fault, 1.0)
    run = OnboardingRunFactory(next_attempt_at=clock.current)

    assert attempt(run, clock=clock) == "released"

    run.refresh_from_db()
    assert (run.status, run.phase, run.owner, run.lease_expires_at) == ("pending", "", None, None)
    assert "verify_tax_id" in run.reason and "later attempt" in run.reason
    only = RunAttempt.objects.get(run=run)
    assert only.outcome == "released"
    assert ("HTTP 503" if fault == "error_rate" else "HTTP 429") in only.reason
    assert "after 4 tries" in only.reason  # ONBOARDING_STEP_RETRIES = 3 retries after the first try
    assert fake_services.stats()["requests"] == 4
    assert not StepReceipt.objects.filter(run=run).exists()

    # The run is due again later (Retry-After or backoff): an attempt before then takes nothing.
    assert run.next_attempt_at is not None and only.retry_due_at == run.next_attempt_at
    assert run.next_attempt_at > clock.current
    assert attempt(run, clock=clock) == "not_claimable"
    # Once it is due, the next attempt (as the watcher would start it) finishes the run.
    clock.advance((run.next_attempt_at - clock.current).total_seconds())
    setattr(fake_services.config, fault, 0.0)
    assert attempt(run, clock=clock) == "completed"
    assert OnboardingRun.objects.get(pk=run.pk).fence == 2


def test_run__timeouts_are_temporary_and_the_retry_reuses_the_key(fake_services, settings):
    settings.WEAVE = {**settings.WEAVE, "SUPPLIER_API_TIMEOUT": 0.2, "ONBOARDING_STEP_RETRIES": 1}
    fake_services.config.hang_rate = 1.0
    # The service hangs until the fake stops: no load can make an answer beat the client's timeout.
    fake_services.config.hang_seconds = 60.0
    run = OnboardingRunFactory()

    assert attempt(run) == "released"

    assert "timed out" in RunAttempt.objects.get(run=run).reason
    stats = fake_services.stats()
    # The service did the work once and stored it; the retry with the same key was a replay.
    assert stats["keys"] == {idempotency_key(run.pk, "verify_tax_id"): 2}
    assert (stats["unique_keys"], stats["replays"]) == (1, 1)


def test_run__finished_run_is_not_claimable_and_writes_nothing(fake_services):
    run = OnboardingRunFactory()
    assert attempt(run) == "completed"
    assert attempt(run) == "not_claimable"
    assert RunAttempt.objects.filter(run=run).count() == 1
    assert StepReceipt.objects.values("run", "step").annotate(n=Count("pk")).filter(n__gt=1).count() == 0


def test_run__missing_service_url_waits_instead_of_failing(settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "SUPPLIER_API_URL": ""}
    run = OnboardingRunFactory()
    assert attempt(run) == "released"
    run.refresh_from_db()
    assert run.status == "pending" and "SUPPLIER_API_URL is not set" in run.reason


@pytest.mark.django_db(transaction=True)
def test_run__background_heartbeat_renews_on_its_own_connection_during_a_slow_call(fake_services, settings):
    # As in a qcluster worker: the heartbeat thread renews while the main thread waits on HTTP. The call
    # is held open until the test has seen the lease move twice in the database (events, not a latency);
    # the lease is long, so no delay on a loaded machine can lapse it.
    settings.WEAVE = {**settings.WEAVE, "HEARTBEAT_INTERVAL": 0.05}
    hold = fake_services.hold("/tax-ids/verify")
    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=30.0)
    seen: dict = {}

    def watch_the_lease_move():
        try:
            if not hold.arrived.wait(30):
                return
            start = OnboardingRun.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)
            expiries = {start}
            deadline = time.monotonic() + 30  # bounds the wait only
            while len(expiries) < 3 and time.monotonic() < deadline:
                expiries.add(OnboardingRun.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk))
                time.sleep(0.01)
            seen["expiries"] = sorted(expiries)
        finally:
            hold.release()
            connection.close()

    watcher = threading.Thread(target=watch_the_lease_move)
    watcher.start()
    outcome = worker.execute()
    watcher.join(60)

    assert outcome == "completed"
    # Renewed twice while the main thread was still inside the held call, each a later expiry.
    assert len(seen.get("expiries", [])) == 3, seen
    renewals = worker.heartbeats["verify_tax_id"].renewals
    assert len(renewals) >= 4  # before the call, at least twice during it, before the save
    assert StepReceipt.objects.filter(run=run).count() == 6


def test_run__welcome_refused_at_commit_fails_the_run_and_rolls_its_save_back(fake_services, monkeypatch):
    # The preflight passed, yet the create refuses at commit time (the safety net): the phase save goes too.
    from onboarding.steps import builtin as steps

    def refuse(**kwargs):
        raise ValidationError({"title": "refused at the last moment"})

    monkeypatch.setattr(steps, "notification_create", refuse)
    run = OnboardingRunFactory()
    assert attempt(run) == "failed"
    run.refresh_from_db()
    assert run.phase == "register_bank_account"  # step 6's phase save was rolled back with the refusal
    assert "welcome notification was refused" in run.reason
    assert not StepReceipt.objects.filter(run=run, step="send_welcome_notification").exists()
    assert not Notification.objects.exists()


def test_run__a_welcome_that_would_be_refused_fails_before_any_call_or_write(fake_services, settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_MAX_PAYLOAD_BYTES": 10}
    run = OnboardingRunFactory()
    assert attempt(run) == "failed"
    run.refresh_from_db()
    assert run.phase == "" and "welcome notification would be refused" in run.reason
    assert fake_services.stats()["requests"] == 0
    assert not VendorRecord.objects.exists() and not PaymentTerms.objects.exists()
    assert not StepReceipt.objects.filter(run=run).exists()


def test_run__no_iban_fails_before_any_call_or_write(fake_services):
    run = OnboardingRunFactory(supplier=SupplierFactory(iban=""))
    assert attempt(run) == "failed"
    run.refresh_from_db()
    assert run.phase == "" and "no IBAN" in run.reason
    assert fake_services.stats()["requests"] == 0
    assert not VendorRecord.objects.exists()


@pytest.mark.parametrize("length", [1, 184, 185, 199, 200])
def test_run__the_welcome_title_fits_whatever_the_legal_name_length(fake_services, length):
    name = ("Acme Fasteners und Söhne " * 10)[:length].strip() or "A"
    run = OnboardingRunFactory(supplier=SupplierFactory(legal_name=name.ljust(length, "x")))
    assert attempt(run) == "completed"
    welcome = Notification.objects.get(device_token=run.supplier.device_token)
    assert len(welcome.title) <= 200 and welcome.title.startswith("Welcome aboard, ")

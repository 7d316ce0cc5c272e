"""Cancel cleans up honestly: committed rows are listed, and "Cancel and undo" runs each step's undo under a lease."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.urls import reverse

from demo.models import ErpVendor
from onboarding import queue
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, RunAttempt, StepReceipt, VendorRecord
from onboarding.runner import claim_attempt, run_onboarding
from onboarding.services import onboarding_cancel, onboarding_start, onboarding_sweep
from onboarding.steps import BaseStep
from onboarding.steps.plan import DEFAULT_PLAN
from tests.factories import SupplierFactory
from weave.leases import LeaseLost

pytestmark = pytest.mark.django_db
TTL = 30.0
WITH_ERP = [*DEFAULT_PLAN[:3], "demo.steps.CreateErpVendor", *DEFAULT_PLAN[3:]]


def user(name, *codenames):
    u = get_user_model().objects.create_user(username=name, password="x", is_staff=True)
    u.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return get_user_model().objects.get(pk=u.pk)


@pytest.fixture
def undoer():
    return user("undoer", "undo_run", "view_onboardingrun", "change_onboardingrun")


@pytest.fixture
def halfway(settings, fake_services, clock):
    """A run with the ERP step in its plan, stopped after create_erp_vendor and set_payment_terms."""
    settings.WEAVE = {**settings.WEAVE, "ONBOARDING_STEPS": WITH_ERP}
    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    attempt = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    for step in attempt.steps[:5]:
        attempt.run_step(step)
    attempt.give_back("paused by the test", requeue=False)
    assert (VendorRecord.objects.count(), ErpVendor.objects.count(), PaymentTerms.objects.count()) == (1, 1, 1)
    return OnboardingRun.objects.get(pk=run.pk)


def test_cancel_and_undo__undoes_committed_steps_newest_first_under_a_new_fence(halfway, undoer, clock):
    assert onboarding_cancel(run=halfway, cancelled_by=undoer, undo=True, clock=clock) is True
    row = OnboardingRun.objects.get(pk=halfway.pk)
    assert (row.status, row.undo_state) == ("cancelled", "requested")

    assert run_onboarding(halfway.pk, clock=clock, background=False) == "released"

    row = OnboardingRun.objects.get(pk=halfway.pk)
    assert (row.status, row.undo_state, row.owner, row.fence) == ("cancelled", "done", None, 2)
    assert row.reason == (
        "Cancelled and undone: set_payment_terms, create_erp_vendor, create_vendor_record. "
        "Left in place (no undo): screen_sanctions, verify_tax_id."
    )
    assert not VendorRecord.objects.exists() and not ErpVendor.objects.exists() and not PaymentTerms.objects.exists()
    undone = dict(StepReceipt.objects.filter(run=halfway, undone_at__isnull=False).values_list("step", "undone_fence"))
    assert undone == {"set_payment_terms": 2, "create_erp_vendor": 2, "create_vendor_record": 2}
    assert StepReceipt.objects.filter(run=halfway).count() == 5  # the receipts stay: the history is kept
    assert RunAttempt.objects.filter(run=halfway, fence=2).get().outcome == "released"


def test_undo__a_stale_undo_worker_is_refused_and_changes_nothing(halfway, undoer, clock):
    onboarding_cancel(run=halfway, cancelled_by=undoer, undo=True, clock=clock)
    stale = claim_attempt(halfway.pk, ttl=TTL, clock=clock, background=False, owner="stale")
    assert stale.undoing
    clock.advance(TTL + 1)
    OnboardingRun.objects.filter(pk=halfway.pk).update(
        owner="new-owner", fence=F("fence") + 1, lease_expires_at=clock.current + timedelta(hours=1)
    )
    receipt = StepReceipt.objects.get(run=halfway, step="set_payment_terms")
    step = next(s for s in stale.steps if s.name == "set_payment_terms")

    with pytest.raises(LeaseLost, match="new-owner at fence 3"):
        stale.undo_step(step, receipt)

    assert PaymentTerms.objects.filter(supplier=halfway.supplier).exists()  # the undo's delete rolled back
    assert not StepReceipt.objects.filter(run=halfway, undone_at__isnull=False).exists()
    row = OnboardingRun.objects.get(pk=halfway.pk)
    assert (row.owner, row.fence, row.undo_state) == ("new-owner", 3, "requested")


def test_undo__only_removes_rows_the_run_created(settings, fake_services, undoer, clock):
    # An earlier, cancelled run created the vendor; a later run reused it. Undoing the later one keeps it.
    supplier = SupplierFactory()
    first = onboarding_start(supplier=supplier, started_by=None)
    a = claim_attempt(first.pk, ttl=TTL, clock=clock, background=False)
    for step in a.steps[:3]:
        a.run_step(step)
    a.give_back("paused", requeue=False)
    onboarding_cancel(run=first)
    second = onboarding_start(supplier=supplier, started_by=None)
    b = claim_attempt(second.pk, ttl=TTL, clock=clock, background=False)
    for step in b.steps[:3]:
        b.run_step(step)
    b.give_back("paused", requeue=False)
    assert StepReceipt.objects.get(run=second, step="create_vendor_record").output["created"] is False

    onboarding_cancel(run=second, cancelled_by=undoer, undo=True, clock=clock)
    assert run_onboarding(second.pk, clock=clock, background=False) == "released"
    assert VendorRecord.objects.filter(supplier=supplier).exists()


def test_cancel_and_undo__needs_the_permission_and_plain_cancel_does_not_undo(halfway, clock):
    with pytest.raises(PermissionDenied, match="undo_run"):
        onboarding_cancel(run=halfway, cancelled_by=user("plain", "change_onboardingrun"), undo=True)
    assert onboarding_cancel(run=halfway, clock=clock) is True
    assert OnboardingRun.objects.get(pk=halfway.pk).undo_state == ""
    assert run_onboarding(halfway.pk, clock=clock, background=False) == "not_claimable"
    assert VendorRecord.objects.exists()


def test_cancel_and_undo__of_a_run_a_worker_holds_waits_for_the_worker_to_let_go(
    halfway, undoer, clock, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(queue, "enqueue_run", sent.append)
    holder = claim_attempt(halfway.pk, ttl=TTL, clock=clock, background=False)
    with django_capture_on_commit_callbacks(execute=True):
        onboarding_cancel(run=halfway, cancelled_by=undoer, undo=True, clock=clock)
    assert run_onboarding(halfway.pk, clock=clock, background=False) == "busy"
    assert PaymentTerms.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        assert holder.execute() == "released"  # refused at its next save: the run was cancelled
    assert sent == [halfway.pk, halfway.pk]  # asked by the service, and again once the holder let go
    assert run_onboarding(halfway.pk, clock=clock, background=False) == "released"
    assert OnboardingRun.objects.get(pk=halfway.pk).undo_state == "done"


def test_sweep__finds_a_cancelled_run_waiting_for_its_undo(halfway, undoer, clock):
    onboarding_cancel(run=halfway, cancelled_by=undoer, undo=True, clock=clock)
    assert onboarding_sweep(clock=clock) == [halfway.pk]
    run_onboarding(halfway.pk, clock=clock, background=False)
    assert onboarding_sweep(clock=clock) == []


def test_failed_run__can_be_cancelled_and_undone(fake_services, undoer, clock):
    supplier = SupplierFactory()
    fake_services.config.refused_ibans = [supplier.iban]
    run = onboarding_start(supplier=supplier, started_by=None)
    assert run_onboarding(run.pk, background=False) == "failed"
    assert onboarding_cancel(run=run, cancelled_by=undoer, undo=True) is True
    assert run_onboarding(run.pk, background=False) == "released"
    assert not VendorRecord.objects.exists() and not PaymentTerms.objects.exists() and not BankAccount.objects.exists()


def test_run_page__lists_a_cancelled_runs_committed_rows_with_a_note(client, halfway):
    onboarding_cancel(run=halfway)
    client.force_login(user("viewer", "view_onboardingrun"))
    page = client.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[halfway.pk])).content.decode()
    assert "This run was cancelled after 5 steps committed." in page
    vendor = VendorRecord.objects.get()
    assert f"Vendor {vendor.vendor_number}" in page and "Net 30 in EUR" in page
    assert "committed; has an undo" in page and "committed; no undo (stays)" in page
    assert "demo.steps.CreateErpVendor" in page  # the recorded plan


def test_explain__shows_the_undone_steps(halfway, undoer, clock):
    from onboarding.explain import explain_run

    onboarding_cancel(run=halfway, cancelled_by=undoer, undo=True, clock=clock)
    run_onboarding(halfway.pk, clock=clock, background=False, owner="undo-worker")
    text = explain_run(halfway.pk).as_text()
    assert "step set_payment_terms undone by fence 2 (Cancel and undo)" in text
    assert "Cancelled and undone: set_payment_terms, create_erp_vendor, create_vendor_record." in text


def test_cancel_and_undo_action__confirms_then_cancels_and_queues_the_undo(
    client, halfway, undoer, django_capture_on_commit_callbacks
):
    client.force_login(undoer)
    runs = reverse("admin:weave_onboarding_onboardingrun_changelist")
    selection = {"action": "cancel_and_undo", "_selected_action": [halfway.pk]}
    page = client.post(runs, selection)
    assert page.status_code == 200 and b"Steps without an undo stay as they are." in page.content
    assert OnboardingRun.objects.get(pk=halfway.pk).status == "pending"  # nothing before the answer

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        client.post(runs, {**selection, "post": "yes"}, follow=True)
    row = OnboardingRun.objects.get(pk=halfway.pk)
    assert (row.status, row.undo_state) == ("cancelled", "requested") and "Cancelled by undoer" in row.reason
    assert len(callbacks) == 1  # the undo is enqueued once the cancel commits


# --- a step whose undo calls out: `undo_work` under the heartbeat, then `undo`'s writes --------------------

deposits: list[tuple] = []  # what the deposit step's parts saw
deposit_faults: list[Exception] = []  # raised, in turn, by the next undo_work calls


class TakeDeposit(BaseStep):
    """A site's step that takes a deposit at a payment service, and refunds it when the run is undone."""

    name = "take_deposit"

    def work(self, ctx):
        return {"deposit": f"D-{ctx.run.pk}"}

    def commit(self, ctx, output):
        return output

    def undo_work(self, ctx, output):
        deposits.append(("undo_work", output["deposit"], ctx.idempotency_key, ctx.heartbeat is not None))
        if deposit_faults:
            raise deposit_faults.pop(0)
        return {"refund": f"RF-{output['deposit']}"}

    def undo(self, ctx, value):
        with pytest.raises(RuntimeError, match=r"belong in undo_work\(\), not in undo\(\)"):
            ctx.http  # noqa: B018  (the guarded transaction holds the run's row lock)
        deposits.append(("undo", value["refund"], ctx.idempotency_key, False))


@pytest.fixture
def deposit_taken(settings, fake_services, clock):
    """A cancelled run, waiting for its undo, whose committed steps end with the deposit."""
    settings.WEAVE = {**settings.WEAVE, "ONBOARDING_STEPS": [*DEFAULT_PLAN[:3], f"{__name__}.TakeDeposit"]}
    deposits.clear()
    deposit_faults.clear()
    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    attempt = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    for step in attempt.steps[:4]:
        attempt.run_step(step)
    attempt.give_back("paused by the test", requeue=False)
    onboarding_cancel(run=run, cancelled_by=user("undoer", "undo_run", "change_onboardingrun"), undo=True, clock=clock)
    yield OnboardingRun.objects.get(pk=run.pk)
    deposits.clear()
    deposit_faults.clear()


def test_undo_work__calls_out_under_its_own_key_then_undo_writes_with_the_answer(deposit_taken, clock):
    run = deposit_taken
    assert run_onboarding(run.pk, clock=clock, background=False) == "released"

    key = f"weave-onboarding:{run.pk}:take_deposit:undo"  # never the key of the call it undoes
    assert deposits == [("undo_work", f"D-{run.pk}", key, True), ("undo", f"RF-D-{run.pk}", key, False)]
    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.status, row.undo_state) == ("cancelled", "done")
    assert row.reason.startswith("Cancelled and undone: take_deposit, create_vendor_record.")
    assert StepReceipt.objects.get(run=run, step="take_deposit").undone_fence == 2


def test_undo_work__a_temporary_failure_waits_and_tries_again_rather_than_failing_the_undo(deposit_taken, clock):
    from onboarding.errors import TemporaryFailure

    run = deposit_taken
    deposit_faults.append(TemporaryFailure("Payment service answered 503.", retry_after=30))
    assert run_onboarding(run.pk, clock=clock, background=False) == "released"

    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.status, row.undo_state, row.owner) == ("cancelled", "requested", None)
    assert row.next_attempt_at == clock.current + timedelta(seconds=30)
    assert row.reason.startswith(
        "Undo of take_deposit failed for now: Payment service answered 503. Undone before it: nothing. "
        "Waiting 30.0 s (as the service asked with Retry-After). Next attempt due at "
    )
    receipt = StepReceipt.objects.get(run=run, step="take_deposit")
    assert receipt.undone_at is None and VendorRecord.objects.filter(supplier=run.supplier).exists()
    attempt = RunAttempt.objects.get(run=run, fence=2)
    assert attempt.outcome == "released" and attempt.reason == row.reason
    assert onboarding_sweep(clock=clock) == []  # not due before its time

    clock.advance(31)
    assert onboarding_sweep(clock=clock) == [run.pk]
    assert run_onboarding(run.pk, clock=clock, background=False) == "released"
    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.status, row.undo_state) == ("cancelled", "done")
    assert [what for what, *_ in deposits] == ["undo_work", "undo_work", "undo"]

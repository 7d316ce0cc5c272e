"""Retry a failed run (new fence, resume after the last receipt) and re-onboard a completed supplier on purpose."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from notifications.models import Notification
from onboarding.errors import RunNotRetryable
from onboarding.models import OnboardingRun, RunAttempt, StepReceipt, Supplier
from onboarding.runner import run_onboarding
from onboarding.services import onboarding_retry, onboarding_start
from onboarding.steps import idempotency_key
from onboarding.testing.numbers import german_iban
from tests.factories import OnboardingRunFactory, SupplierFactory

pytestmark = pytest.mark.django_db
RUNS = reverse("admin:weave_onboarding_onboardingrun_changelist")
SUPPLIERS = reverse("admin:weave_onboarding_supplier_changelist")


def user(name, *codenames):
    u = get_user_model().objects.create_user(username=name, password="x", is_staff=True)
    u.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return get_user_model().objects.get(pk=u.pk)  # fresh: no cached permissions


@pytest.fixture
def fixer():
    return user("fixer", "retry_run", "view_onboardingrun", "change_onboardingrun")


@pytest.fixture
def bank_refused(fake_services):
    """A run that failed at step 5: the bank refused the supplier's (closed) account."""
    supplier = SupplierFactory()
    fake_services.config.refused_ibans = [supplier.iban]
    run = onboarding_start(supplier=supplier, started_by=None)
    assert run_onboarding(run.pk, background=False) == "failed"
    run.refresh_from_db()
    assert (run.phase, run.failed_step, run.fence) == ("set_payment_terms", "register_bank_account", 1)
    return run


def test_retry__resumes_after_the_last_receipt_under_a_new_fence_with_new_keys(bank_refused, fixer, fake_services):
    run = bank_refused
    supplier = run.supplier
    supplier.iban = german_iban(424242)  # corrected: an open account
    supplier.save()

    reopened = onboarding_retry(run=run, retried_by=fixer, why="IBAN corrected after the bank's letter.")

    assert (reopened.status, reopened.fence, reopened.owner, reopened.reopened) == ("pending", 2, None, 1)
    assert reopened.reason.startswith("Re-opened by fixer: IBAN corrected after the bank's letter.")
    assert "Resumes after set_payment_terms" in reopened.reason and "Bank account refused" in reopened.reason
    assert run_onboarding(run.pk, background=False) == "completed"

    receipts = list(StepReceipt.objects.filter(run=run).values_list("step", "fence"))
    # The first four were not done again; the rest landed at the claim after the re-open (fence 3).
    assert receipts[:4] == [
        ("verify_tax_id", 1),
        ("screen_sanctions", 1),
        ("create_vendor_record", 1),
        ("set_payment_terms", 1),
    ]
    assert receipts[4:] == [("register_bank_account", 3), ("send_welcome_notification", 3)]
    # The bank was asked again under a new key: the old one would only replay the old refusal.
    keys = fake_services.stats()["keys"]
    assert keys[idempotency_key(run.pk, "register_bank_account")] == 1
    assert keys[idempotency_key(run.pk, "register_bank_account", 1)] == 1
    assert list(RunAttempt.objects.filter(run=run).values_list("fence", "outcome")) == [(1, "failed"), (3, "completed")]


def test_retry__the_same_key_would_have_replayed_the_refusal(bank_refused, fake_services):
    """Why a re-open needs new keys: the service answers a repeated key from its store."""
    fake_services.config.refused_ibans = []
    import httpx

    answer = httpx.post(
        f"{fake_services.url}/bank-accounts",
        json={"holder": "x", "iban": bank_refused.supplier.iban},
        headers={"Idempotency-Key": idempotency_key(bank_refused.pk, "register_bank_account")},
    )
    assert answer.status_code == 422 and answer.headers["Idempotent-Replayed"] == "true"


def test_retry__needs_the_permission(bank_refused):
    stranger = user("stranger", "view_onboardingrun", "change_onboardingrun")
    with pytest.raises(PermissionDenied, match="retry_run"):
        onboarding_retry(run=bank_refused, retried_by=stranger, why="because")
    with pytest.raises(PermissionDenied):
        onboarding_retry(run=bank_refused, retried_by=None, why="because")
    assert OnboardingRun.objects.get(pk=bank_refused.pk).status == "failed"


@pytest.mark.parametrize("status", ["completed", "pending", "running", "cancelled"])
def test_retry__refused_unless_failed(fixer, status):
    run = OnboardingRunFactory(status=status)
    with pytest.raises(RunNotRetryable, match=f"is {status}; only a failed run"):
        onboarding_retry(run=run, retried_by=fixer, why="try")
    assert OnboardingRun.objects.get(pk=run.pk).fence == 0


def test_retry__refused_for_a_failure_a_retry_cannot_fix(fake_services, fixer):
    supplier = SupplierFactory(legal_name="Shady Exports Ltd")
    fake_services.config.sanctioned_names = [supplier.legal_name]
    run = onboarding_start(supplier=supplier, started_by=None)
    assert run_onboarding(run.pk, background=False) == "failed"
    run.refresh_from_db()
    assert (run.failed_step, run.failure_fixable) == ("screen_sanctions", False)
    with pytest.raises(RunNotRetryable, match="Start a new run instead"):
        onboarding_retry(run=run, retried_by=fixer, why="they said it's fine")


def test_retry__refused_while_the_supplier_is_still_invalid_and_without_a_why(bank_refused, fixer):
    Supplier.objects.filter(pk=bank_refused.supplier_id).update(iban="DE00SHORT")
    with pytest.raises(RunNotRetryable, match="Say why"):
        onboarding_retry(run=bank_refused, retried_by=fixer, why="  ")
    with pytest.raises(ValidationError) as refused:
        onboarding_retry(run=bank_refused, retried_by=fixer, why="fixed?")
    assert list(refused.value.message_dict) == ["iban"]
    assert OnboardingRun.objects.get(pk=bank_refused.pk).status == "failed"


def test_retry_action__asks_why_then_reopens_failed_runs_only(client, bank_refused, fixer, fake_services):
    completed = OnboardingRunFactory(status="completed")
    fake_services.config.refused_ibans = []
    client.force_login(fixer)
    selection = {"action": "retry_failed", "_selected_action": [bank_refused.pk, completed.pk]}

    page = client.post(RUNS, selection)
    assert page.status_code == 200 and b"What was fixed?" in page.content
    assert OnboardingRun.objects.get(pk=bank_refused.pk).status == "failed"  # nothing yet

    done = client.post(RUNS, {**selection, "post": "yes", "why": "Bank reopened the account."}, follow=True)
    messages = [str(m) for m in get_messages(done.wsgi_request)]
    link = f'<a href="{RUNS}{bank_refused.pk}/change/">{bank_refused.pk}</a>'  # ids in messages are links
    assert any(m.startswith(f"Re-opened 1 failed run: {link}") for m in messages)
    assert any(f"1 not retried: #{completed.pk} (completed: only a failed run can be retried)" in m for m in messages)
    row = OnboardingRun.objects.get(pk=bank_refused.pk)
    assert (row.status, row.fence) == ("pending", 2) and "by fixer: Bank reopened the account." in row.reason
    assert OnboardingRun.objects.get(pk=completed.pk).status == "completed"


def test_retry_action__hidden_without_the_permission(client, bank_refused):
    client.force_login(user("viewer", "view_onboardingrun", "change_onboardingrun"))
    page = client.get(RUNS)
    assert b"retry_failed" not in page.content and b"cancel_and_undo" not in page.content


def test_reonboard_action__asks_before_a_second_welcome(client, fake_services, django_capture_on_commit_callbacks):
    done = SupplierFactory()
    fresh = SupplierFactory()
    first = onboarding_start(supplier=done, started_by=None)
    assert run_onboarding(first.pk, background=False) == "completed"
    assert Notification.objects.filter(device_token=done.device_token).count() == 1
    client.force_login(user("starter", "view_supplier", "start_onboarding"))
    selection = {"action": "start_onboarding", "_selected_action": [done.pk, fresh.pk]}

    page = client.post(SUPPLIERS, selection)
    assert page.status_code == 200
    assert b"second welcome notification" in page.content and f"completed run {first.pk}".encode() in page.content
    assert OnboardingRun.objects.count() == 1  # nothing started before the answer

    with django_capture_on_commit_callbacks(execute=False):
        client.post(SUPPLIERS, {**selection, "post": "yes"}, follow=True)
    again = OnboardingRun.objects.filter(supplier=done).exclude(pk=first.pk).get()
    assert "Re-onboarding confirmed by starter" in again.reason
    assert OnboardingRun.objects.filter(supplier=fresh).count() == 1
    assert run_onboarding(again.pk, background=False) == "completed"
    assert Notification.objects.filter(device_token=done.device_token).count() == 2  # the one confirmed


def test_start_action__without_completed_suppliers_needs_no_confirmation(client, django_capture_on_commit_callbacks):
    client.force_login(user("starter", "view_supplier", "start_onboarding"))
    bad = SupplierFactory(tax_id="DE123456780")  # checksum wrong
    good = SupplierFactory()
    with django_capture_on_commit_callbacks(execute=False):
        done = client.post(
            SUPPLIERS, {"action": "start_onboarding", "_selected_action": [good.pk, bad.pk]}, follow=True
        )
    messages = [str(m) for m in get_messages(done.wsgi_request)]
    assert any(m.startswith("Started onboarding for 1") for m in messages)
    assert any("Refused 1 with invalid data" in m and "tax id" in m.lower() for m in messages)
    assert list(OnboardingRun.objects.values_list("supplier_id", flat=True)) == [good.pk]

"""The onboarding admin through Django's test client."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse
from django_q.models import OrmQ

from onboarding.models import OnboardingRun, RunAttempt
from onboarding.runner import claim_attempt, run_onboarding
from tests.factories import OnboardingRunFactory, SupplierFactory

pytestmark = pytest.mark.django_db
SUPPLIERS = reverse("admin:weave_onboarding_supplier_changelist")
RUNS = reverse("admin:weave_onboarding_onboardingrun_changelist")


def staff(*perms: str):
    user = get_user_model().objects.create_user(username=f"staff-{'-'.join(perms) or 'none'}", password="x")
    user.is_staff = True
    user.save()
    user.user_permissions.set(Permission.objects.filter(codename__in=perms))
    return user


@pytest.fixture
def starter(client):
    client.force_login(staff("view_supplier", "start_onboarding"))
    return client


@pytest.fixture
def operator(client):
    client.force_login(staff("view_onboardingrun", "change_onboardingrun", "view_runattempt", "view_stepreceipt"))
    return client


def act(client, url, action, objects):
    response = client.post(
        url, {"action": action, "_selected_action": [o.pk for o in objects], "index": 0}, follow=True
    )
    assert response.status_code == 200
    return response, [str(m) for m in get_messages(response.wsgi_request)]


def test_start_action__creates_runs_and_enqueues_them(starter, django_capture_on_commit_callbacks):
    suppliers = SupplierFactory.create_batch(2)
    with django_capture_on_commit_callbacks(execute=True):
        _, messages = act(starter, SUPPLIERS, "start_onboarding", suppliers)

    runs = OnboardingRun.objects.filter(supplier__in=suppliers)
    assert runs.count() == 2 and {r.status for r in runs} == {"pending"}
    assert {r.created_by.username for r in runs} == {"staff-view_supplier-start_onboarding"}
    # One drain of onboarding runs, asked on commit: it runs one and asks for a helper for the other.
    queued = [(q.task["func"], q.task["args"]) for q in OrmQ.objects.all()]
    assert queued == [("weave.jobs.tasks.drain", ("onboarding",))]
    assert any(m.startswith("Started onboarding for 2") for m in messages)


def test_start_action__refused_for_staff_without_the_permission(client):
    client.force_login(staff("view_supplier"))
    supplier = SupplierFactory()
    page = client.get(SUPPLIERS)
    assert page.status_code == 200
    assert b"start_onboarding" not in page.content  # the action is not offered

    act(client, SUPPLIERS, "start_onboarding", [supplier])
    assert not OnboardingRun.objects.exists()


def test_start_action__skips_a_supplier_with_an_active_run(starter):
    busy, free = SupplierFactory.create_batch(2)
    active = OnboardingRunFactory(supplier=busy)

    _, messages = act(starter, SUPPLIERS, "start_onboarding", [busy, free])

    assert OnboardingRun.objects.filter(supplier=busy).count() == 1
    assert OnboardingRun.objects.filter(supplier=free).count() == 1
    assert any("Started onboarding for 1" in m for m in messages)
    skipped = [m for m in messages if "skipped 1" in m]
    assert skipped and f"run {active.pk}" in skipped[0]
    assert "applies to suppliers without a pending or running run" in skipped[0]


def test_resume_action__enqueues_active_runs_and_skips_finished_ones(operator, django_capture_on_commit_callbacks):
    active = OnboardingRunFactory()
    done = OnboardingRunFactory(status="completed")
    with django_capture_on_commit_callbacks(execute=True):
        _, messages = act(operator, RUNS, "resume", [active, done])
    assert OrmQ.objects.count() == 1
    assert any(m.startswith("Enqueued 1 run") for m in messages)
    assert any(
        f"Resume applies to pending and running runs only; skipped 1: #{done.pk} ({done.status})" in m for m in messages
    )


def test_cancel_action__cancels_active_runs_only(operator):
    active = OnboardingRunFactory()
    failed = OnboardingRunFactory(status="failed", reason="Tax id invalid.")
    _, messages = act(operator, RUNS, "cancel", [active, failed])
    active.refresh_from_db()
    failed.refresh_from_db()
    assert active.status == "cancelled" and "Cancelled by staff-" in active.reason
    assert (failed.status, failed.reason) == ("failed", "Tax id invalid.")
    assert any(m.startswith("Cancelled 1 run") for m in messages)


def test_changelists_render_runs_with_receipts_and_attempts(operator, fake_services):
    run = OnboardingRunFactory()
    assert run_onboarding(run.pk, background=False) == "completed"
    blocked_run = OnboardingRunFactory()
    RunAttempt.objects.create(
        run=blocked_run,
        fence=1,
        owner="stale-worker",
        started_at="2030-01-01T00:00:00Z",
        outcome="blocked",
        reason="Lease lost at verify_tax_id: now held by fresh-worker at fence 2.",
    )

    page = operator.get(RUNS)
    assert page.status_code == 200
    assert b"send_welcome_notification" in page.content  # the phase column

    blocked = operator.get(RUNS, {"blocked": "yes"})
    assert list(blocked.context["cl"].result_list) == [blocked_run]

    detail = operator.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk]))
    assert detail.status_code == 200
    for step in ("verify_tax_id", "register_bank_account", "send_welcome_notification"):
        assert step.encode() in detail.content
    assert b"completed" in detail.content

    # The bare list shows every attempt (no "0 results (5 total)" behind a default filter); blocked is a filter.
    attempts = operator.get(reverse("admin:weave_onboarding_runattempt_changelist"), {"outcome": "blocked"})
    assert attempts.status_code == 200
    assert list(attempts.context["cl"].result_list) == list(RunAttempt.objects.filter(outcome="blocked"))
    assert b"now held by fresh-worker at fence 2" in attempts.content
    everything = operator.get(reverse("admin:weave_onboarding_runattempt_changelist"))
    assert everything.context["cl"].result_count == RunAttempt.objects.count() == 2

    receipts = operator.get(reverse("admin:weave_onboarding_stepreceipt_changelist"))
    assert receipts.status_code == 200 and receipts.context["cl"].result_count == 6


def test_run_admin__lease_fields_are_read_only_and_judged_live_by_the_database(operator, fake_services):
    run = OnboardingRunFactory()
    claim_attempt(run.pk, background=False)
    page = operator.get(RUNS)
    assert page.status_code == 200
    row = page.context["cl"].result_list[0]
    assert row.lease_live is True
    admin_form = operator.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk])).context[
        "adminform"
    ]
    # The whole page is read-only (no change permission on a run): shown, never an editable field.
    assert not {"owner", "fence", "lease_expires_at", "status", "phase"} & set(admin_form.form.fields)
    assert {"owner", "fence", "lease_expires_at_display", "status_word", "step"} <= set(admin_form.readonly_fields)


def test_run_admin__an_id_that_is_no_runs_is_said_not_to_exist_not_a_server_error(operator):
    """A mistyped URL, or a relative link resolved under a run's page (".../5/change/widgets.css")."""
    run = OnboardingRunFactory()
    for object_id in (f"{run.pk}x", f"{run.pk}/change/widgets.css", "999999"):
        response = operator.get(f"{RUNS}{object_id}/change/", follow=True)
        assert response.status_code == 200, object_id
        assert any("doesn’t exist" in str(m) for m in get_messages(response.wsgi_request)), object_id
    active = operator.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk]))
    assert active.context["weave_refresh"] > 0, "a pending run's page still reloads itself"

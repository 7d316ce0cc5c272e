"""Starting, cancelling and sweeping runs."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction

from onboarding import queue, tasks
from onboarding.errors import AlreadyOnboarded, RunAlreadyActive
from onboarding.models import OnboardingRun, OnboardingRunQuerySet, RunAttempt, StepReceipt, VendorRecord
from onboarding.runner import claim_attempt, run_onboarding
from onboarding.services import onboarding_cancel, onboarding_start, onboarding_sweep
from onboarding.steps import Step, StepContext
from onboarding.steps.builtin import STEPS
from tests.factories import OnboardingRunFactory, SupplierFactory

pytestmark = pytest.mark.django_db
TTL = 30.0


def test_start__refuses_a_second_active_run_for_the_supplier():
    supplier = SupplierFactory()
    first = onboarding_start(supplier=supplier, started_by=None)
    with pytest.raises(RunAlreadyActive, match=f"run {first.pk} \\(pending\\)"):
        onboarding_start(supplier=supplier, started_by=None)
    # The database constraint holds even without the service's check.
    with pytest.raises(IntegrityError), transaction.atomic():
        OnboardingRun.objects.create(supplier=supplier)
    first.status = "completed"
    first.save(update_fields=["status"])
    # A completed supplier starts again only on purpose (a second welcome goes out).
    with pytest.raises(AlreadyOnboarded, match=f"run {first.pk}"):
        onboarding_start(supplier=supplier, started_by=None)
    again = onboarding_start(supplier=supplier, started_by=None, force=True)
    assert again.pk != first.pk and f"completed run {first.pk}" in again.reason


def test_start__enqueues_the_run_on_commit(django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr(queue, "enqueue_run", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    assert sent == [run.pk]


def test_cancel__a_running_worker_stops_at_its_next_save_and_gives_the_lease_back(fake_services, clock):
    def cancel_midway(ctx: StepContext):
        assert onboarding_cancel(run=ctx.run) is True
        return {}

    steps = (*STEPS[:2], Step("create_vendor_record", "cancelled here", work=cancel_midway, commit=STEPS[2].save))
    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=(*steps, *STEPS[3:]))

    assert worker.execute() == "released"

    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.status, row.phase, row.owner, row.lease_expires_at) == ("cancelled", "screen_sanctions", None, None)
    assert not VendorRecord.objects.exists()  # the refused save rolled the step's writes back
    assert StepReceipt.objects.filter(run=run).count() == 2
    attempt = RunAttempt.objects.get(run=run)
    assert attempt.outcome == "released" and "cancelled" in attempt.reason
    assert onboarding_cancel(run=row) is False  # already finished


def test_sweep__enqueues_pending_and_expired_runs_but_not_live_or_finished_ones(
    clock, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(queue, "enqueue_run", sent.append)
    pending = OnboardingRunFactory()
    crashed = OnboardingRunFactory()
    live = OnboardingRunFactory()
    OnboardingRunFactory(status="completed")
    OnboardingRunFactory(status="failed")
    OnboardingRun.objects.active().claim(crashed.pk, owner="gone", ttl=TTL, clock=clock)
    clock.advance(TTL + 1)
    OnboardingRun.objects.active().claim(live.pk, owner="busy", ttl=TTL, clock=clock)

    with django_capture_on_commit_callbacks(execute=True):
        found = onboarding_sweep(clock=clock)
    assert found == [pending.pk, crashed.pk]
    assert sent == [pending.pk]  # one request: the engine's drain takes the run due longest and asks for helpers


def test_sweep_task__counts_what_it_enqueued(django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr(queue, "enqueue_run", sent.append)
    runs = OnboardingRunFactory.create_batch(3)
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.sweep() == 3
    assert sent == [runs[0].pk]


def test_task__busy_run_ends_quietly(clock):
    run = OnboardingRunFactory()
    OnboardingRun.objects.active().claim(run.pk, owner="someone", ttl=timedelta(hours=1))
    assert tasks.run_onboarding(run.pk) == "busy"
    assert not RunAttempt.objects.exists()


def test_sweep_schedule__is_created_once_by_weave_schedules_and_points_at_the_task():
    from django.core.management import call_command
    from django_q.models import Schedule

    call_command("weave_schedules")
    call_command("weave_schedules")
    schedule = Schedule.objects.get(name="onboarding.sweep")
    assert (schedule.func, schedule.minutes) == ("onboarding.tasks.sweep", 1)


def test_cancel__between_the_claim_and_the_first_save_releases_at_once(fake_services, clock, monkeypatch):
    run = OnboardingRunFactory()
    claim = OnboardingRun.objects.active().claim

    def claim_then_cancel(pk, **kwargs):
        lease = claim(pk, **kwargs)
        onboarding_cancel(run=run)
        return lease

    monkeypatch.setattr(OnboardingRunQuerySet, "claim", lambda self, pk, **kw: claim_then_cancel(pk, **kw))
    assert run_onboarding(run.pk, ttl=TTL, clock=clock, background=False) == "released"
    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.status, row.owner) == ("cancelled", None)
    assert RunAttempt.objects.get(run=run).reason.startswith("The run was cancelled")


def test_created_by__follows_the_swappable_user_model():
    from django.contrib.auth import get_user_model

    field = OnboardingRun._meta.get_field("created_by")
    assert field.remote_field.model is get_user_model()
    assert field.swappable_setting == "AUTH_USER_MODEL"

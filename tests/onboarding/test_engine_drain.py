"""Onboarding runs drained by the engine: one attempt per drain, helpers asked while more runs are due."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django_q.models import OrmQ

from onboarding.models import OnboardingRun, RunAttempt
from tests.factories import OnboardingRunFactory
from weave.jobs import enqueue_job, get
from weave.jobs.tasks import drain, drain_one
from weave.models import WakeRequest

pytestmark = pytest.mark.django_db(transaction=True)


def queued_drains() -> list[tuple[str, tuple]]:
    """The queued tasks but the push drains that each run's welcome notification asks for."""
    tasks = [(q.task["func"], q.task["args"]) for q in OrmQ.objects.all()]
    return [task for task in tasks if task != ("weave.jobs.tasks.drain", ("notification",))]


def watching_queue(seen: list) -> object:
    """The onboarding job type, noting the queued drains as each attempt starts."""
    declared = get("onboarding")

    def attempt(pk):
        seen.append((pk, queued_drains()))
        return declared.attempt(pk)

    return replace(declared, attempt=attempt)


def test_a_drain_asks_for_a_helper_before_it_runs_the_first_due_run(fake_services):
    runs = OnboardingRunFactory.create_batch(3)
    seen: list = []

    assert drain_one(watching_queue(seen)) == {"completed": 1}

    # The helper is on the queue while this attempt works, so a second worker can start the next run.
    assert seen == [(runs[0].pk, [("weave.jobs.tasks.drain", ("onboarding",))])]
    assert [OnboardingRun.objects.get(pk=r.pk).status for r in runs] == ["completed", "pending", "pending"]
    # The ask after the attempt shares the helper's waiting task.
    assert queued_drains() == [("weave.jobs.tasks.drain", ("onboarding",))]


def test_drains_one_after_another_finish_every_run_and_then_stop_asking(fake_services):
    runs = OnboardingRunFactory.create_batch(3)

    outcomes = [drain("onboarding") for _ in runs]

    assert outcomes == [{"completed": 1}] * 3
    assert set(OnboardingRun.objects.values_list("status", flat=True)) == {"completed"}
    assert RunAttempt.objects.filter(outcome="completed").count() == 3
    OrmQ.objects.all().delete()
    assert drain("onboarding") == {}
    assert queued_drains() == []  # nothing due: no helper, no follow-up


def test_a_single_due_run_asks_for_no_helper(fake_services):
    run = OnboardingRunFactory()
    seen: list = []

    assert drain_one(watching_queue(seen)) == {"completed": 1}

    assert seen == [(run.pk, [])]
    assert OnboardingRun.objects.get(pk=run.pk).status == "completed"
    assert queued_drains() == []


def test_a_run_another_worker_holds_is_skipped_and_its_lease_left_alone(fake_services):
    held, free = OnboardingRunFactory.create_batch(2)
    lease = OnboardingRun.objects.active().claim(held.pk, owner="someone", ttl=timedelta(hours=1))
    # A listing read before the other worker's claim landed still offers the held run first.
    stale = replace(get("onboarding"), due_rows=lambda: OnboardingRun.objects.active().order_by("pk"))

    assert drain_one(stale) == {"busy": 1, "completed": 1}

    row = OnboardingRun.objects.get(pk=held.pk)
    assert (row.owner, row.fence, row.status) == ("someone", lease.fence, "pending")
    assert not RunAttempt.objects.filter(run=held).exists()  # the refused claim wrote nothing
    assert OnboardingRun.objects.get(pk=free.pk).status == "completed"


def test_a_drain_frees_its_request_when_it_starts(fake_services):
    OnboardingRunFactory()
    name = get("onboarding").name

    assert enqueue_job(name, None) is True
    assert enqueue_job(name, None) is False  # one drain waits: a second ask is coalesced
    drain(name)
    assert WakeRequest.objects.filter(name__contains="weave.jobs.drain:onboarding", queued_until__isnull=True).exists()


def test_the_run_due_longest_goes_first_whatever_its_age():
    from django.utils import timezone

    from onboarding.services import runs_needing_a_worker

    retried_late, older, newer = OnboardingRunFactory.create_batch(3)  # by pk, retried_late is oldest
    now = timezone.now()
    OnboardingRun.objects.filter(pk=older.pk).update(created_at=now - timedelta(seconds=30))
    OnboardingRun.objects.filter(pk=newer.pk).update(created_at=now - timedelta(seconds=10))
    # Started before `newer`, but released: due again only 5 s ago, after `newer` was started.
    OnboardingRun.objects.filter(pk=retried_late.pk).update(
        created_at=now - timedelta(seconds=60), next_attempt_at=now - timedelta(seconds=5)
    )

    assert list(runs_needing_a_worker().values_list("pk", flat=True)) == [older.pk, newer.pk, retried_late.pk]

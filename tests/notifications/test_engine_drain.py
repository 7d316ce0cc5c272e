"""Push delivery drained by the engine: the core asks for its drains and keeps its request slot, the
pipeline (claim buffer, concurrent sender, completer) is push's own."""

from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured
from django_q.models import OrmQ

from notifications import queue
from notifications.models import Notification
from tests.factories import NotificationFactory
from weave.jobs import JobType, get, register
from weave.jobs.tasks import drain_pipeline
from weave.leases import DatabaseClock
from weave.models import WakeRequest

pytestmark = pytest.mark.django_db(transaction=True)


def queued() -> list[tuple[str, str, tuple, str]]:
    return [(q.name(), q.task["func"], q.task["args"], q.task.get("group")) for q in OrmQ.objects.all()]


def due_now(n: int) -> None:
    NotificationFactory.create_batch(n)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())


def slot_taken() -> bool:
    return WakeRequest.objects.filter(name=queue.drain_request_name(), queued_until__isnull=False).exists()


def watched(seen: list, outcome: dict | None = None, error: Exception | None = None) -> JobType:
    """The notification job type, its pipeline replaced by one that notes the queue and the slot as it starts."""

    def pipeline(task):
        seen.append((queued(), slot_taken(), task.seconds))
        if error is not None:
            raise error
        return outcome or {"delivered": 0}

    return replace(get(queue.JOB), pipeline=pipeline)


def test_a_push_drain_is_the_engine_s_task_under_push_s_own_request_and_task_name():
    assert queue.enqueue_drain() is True
    assert queue.enqueue_drain() is False  # coalesced while it waits

    assert queued() == [("notifications.drain", "weave.jobs.tasks.drain", ("notification",), "notifications")]
    assert WakeRequest.objects.get().name == queue.drain_request_name()
    assert queue.drain_request_name().startswith("notifications.drain@")


def test_without_a_backlog_the_slot_stays_taken_while_the_pipeline_lingers_and_is_freed_after(settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_BATCH_SIZE": 5, "WAKE_LINGER": 2.0}
    seen: list = []

    assert drain_pipeline(watched(seen)) == {"delivered": 0}

    # While it ran, new requests met a taken slot (they reach it as arrivals) and no helper was queued.
    assert seen == [([], True, 2.0)]
    assert not slot_taken() and queued() == []  # nothing due: nobody asked again


def test_with_more_than_a_batch_due_a_helper_is_queued_before_the_pipeline_starts(settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_BATCH_SIZE": 5, "WAKE_LINGER": 2.0}
    due_now(6)
    seen: list = []

    drain_pipeline(watched(seen))

    helper = ("notifications.drain", "weave.jobs.tasks.drain", ("notification",), "notifications")
    assert seen == [([helper], True, 2.0)]  # the helper's request holds the slot, not this drain
    # Rows are still due at the end, but the slot is the helper's, which has yet to start: the drain
    # leaves it taken, and its ask reaches the helper rather than queueing a second task.
    assert queued() == [helper]
    assert slot_taken()


def test_a_request_that_won_the_slot_during_the_drain_keeps_it_when_the_drain_ends(settings):
    """The drain's slot lapsed (a full loop stops renewing it) and a new request won it: that request's
    task has yet to start, so the drain's end leaves the slot taken and asks for no second task."""
    settings.WEAVE = {**settings.WEAVE, "PUSH_BATCH_SIZE": 5, "WAKE_LINGER": 2.0}
    seen: list = []

    def pipeline(task):
        WakeRequest.objects.filter(name=queue.drain_request_name()).update(queued_until=None)  # lapsed
        due_now(1)
        assert queue.enqueue_drain() is True  # won: a task is queued
        seen.append(queued())
        return {"delivered": 0}

    drain_pipeline(replace(get(queue.JOB), pipeline=pipeline))

    assert len(seen[0]) == 1
    assert queued() == seen[0]  # the row is due, yet no second task: the queued one will take it
    assert slot_taken()
    assert WakeRequest.objects.get(name=queue.drain_request_name()).requests == 1


def test_exactly_one_batch_due_asks_for_no_helper(settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_BATCH_SIZE": 5, "WAKE_LINGER": 0}
    due_now(5)
    seen: list = []

    drain_pipeline(watched(seen))

    assert seen == [([], False, 0.0)]  # no linger: the slot is free for the next request from the start
    assert [name for name, *_ in queued()] == ["notifications.drain"]  # asked at the end: the 5 are still due


def test_a_pipeline_that_raises_frees_the_slot_and_asks_again_while_rows_are_due(settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_BATCH_SIZE": 5, "WAKE_LINGER": 2.0}
    due_now(1)
    seen: list = []

    with pytest.raises(RuntimeError, match="backend exploded"):
        drain_pipeline(watched(seen, error=RuntimeError("backend exploded")))

    assert seen == [([], True, 2.0)]
    assert [name for name, *_ in queued()] == ["notifications.drain"]  # the row is still due: a new drain


def test_the_real_pipeline_delivers_through_the_engine_s_drain(push_settings, fake):
    due_now(3)

    report = drain_pipeline(get(queue.JOB))

    assert report["delivered"] == 3 and fake.stats()["unique_deliveries"] == 3
    assert not slot_taken() and queued() == []


@pytest.mark.parametrize(
    ("declared", "problem"),
    [
        ({"pipeline": dict}, "pipeline needs due_rows and batch_setting"),
        ({"pipeline": dict, "due_rows": Notification.objects.all}, "pipeline needs due_rows and batch_setting"),
        ({"due_rows": Notification.objects.all}, "due_rows goes with an attempt or a pipeline"),
        ({"pipeline": dict, "due_rows": Notification.objects.all, "batch_setting": "NO_SUCH_KEY"}, "batch_setting"),
        (
            {
                "pipeline": dict,
                "attempt": str,
                "due_rows": Notification.objects.all,
                "batch_setting": "PUSH_BATCH_SIZE",
            },
            "give one of an attempt, a pipeline",
        ),
    ],
)
def test_a_pipeline_declared_half_is_refused_at_start(declared, problem):
    with pytest.raises(ImproperlyConfigured, match=problem):
        register(JobType(name="half-pipeline", model=Notification, **declared))
    with pytest.raises(LookupError):
        get("half-pipeline")

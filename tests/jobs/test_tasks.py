"""`django.tasks` on `weave.tasks.WeaveBackend`: enqueue, drain on the worker, results per attempt, fencing."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.jobs.shipping.background import add, charge_and_book, explode
from tests.jobs.shipping.carrier import carrier, during_booking
from tests.jobs.shipping.models import Booking, Shipment
from weave.jobs.runner import run_job, run_next
from weave.models import JobAttempt, TaskRow
from weave.tasks import WeaveBackend
from weave.tasks.compat import TaskResultDoesNotExist, TaskResultStatus, task_backends
from weave.tasks.worker import drain

pytestmark = pytest.mark.django_db
TTL = 30.0


def test_backend_is_weaves_and_says_what_it_supports():
    backend = task_backends["default"]
    assert isinstance(backend, WeaveBackend)
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task


def test_enqueue_then_drain__the_value_is_stored_and_read_back(django_capture_on_commit_callbacks):
    from django_q.models import OrmQ

    with django_capture_on_commit_callbacks(execute=True):
        result = add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert OrmQ.objects.count() == 1  # one coalesced drain request on the broker
    assert drain() == {"done": 1}
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert result.attempts == 1 and result.errors == [] and result.finished_at is not None
    assert add.get_result(result.id).return_value == 5


def test_a_failing_task_stores_its_error_for_the_attempt():
    result = explode.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is ValueError and "no such parcel" in error.traceback


def test_a_failing_task_says_why_it_was_not_retried():
    """A task that raises fails at once unless its error is in `retry_on`: its reason says so, so an operator who
    sees one attempt of three allowed knows why there was no second."""
    explode.enqueue()
    drain()
    attempt = JobAttempt.objects.get(job_type="task")
    assert attempt.outcome == "failed" and attempt.reason == (
        "ValueError: no such parcel (at step run). "
        "Not retried: ValueError is not in the task's retry_on (empty); a task that raises has failed."
    )


def test_a_task_cancelled_by_an_operator_says_so_in_its_errors(clock):
    """A cancelled task reads back FAILED (the framework has no cancelled status): its errors say why,
    with the database time of the cancel, after the errors of the attempts it had before."""
    from weave.jobs.services import job_cancel

    result = explode.using(run_after=clock.current + timedelta(days=1)).enqueue()
    row = TaskRow.objects.get(result_id=result.id)
    assert job_cancel(job_type="task", pks=[row.pk], clock=clock).changed == [row.pk]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "weave.tasks.options.TaskCancelled"
    assert issubclass(error.exception_class, Exception)
    assert f"cancelled at {clock.current:%Y-%m-%d %H:%M:%S}" in error.traceback
    assert f"weave_explain task {row.pk}" in error.traceback
    assert result.finished_at == clock.current


def test_a_task_cancelled_while_waiting_for_a_retry_keeps_its_attempts_errors():
    from weave.jobs.services import job_cancel

    result = explode.using(retry_on=[ValueError], backoff=60).enqueue()
    drain()
    row = TaskRow.objects.get(result_id=result.id)
    assert row.state == "pending" and row.attempts == 1
    assert job_cancel(job_type="task", pks=[row.pk]).changed == [row.pk]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [
        "builtins.ValueError",
        "weave.tasks.options.TaskCancelled",
    ]


def test_priority_and_run_after_order_the_drain(clock):
    later = add.using(run_after=clock.current + timedelta(days=3650)).enqueue(1, 1)
    low = add.using(priority=-10).enqueue(1, 2)
    high = add.using(priority=10).enqueue(1, 3)
    assert drain() == {"done": 2}
    rows = {r.result_id: r for r in TaskRow.objects.all()}
    assert rows[later.id].state == "pending"  # not due yet, by the database clock
    assert (
        JobAttempt.objects.get(job_id=str(rows[high.id].pk)).pk < JobAttempt.objects.get(job_id=str(rows[low.id].pk)).pk
    )


def test_get_result__an_unknown_id_is_refused():
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("nope")


def test_a_stalled_worker_is_taken_over_and_its_late_write_is_refused(clock):
    """The task's worker stalls past its lease; another worker takes over; the stale one wakes and writes."""
    shipment = Shipment.objects.create(parcel="books")
    result = charge_and_book.enqueue(shipment.pk)
    pk = TaskRow.objects.get(result_id=result.id).pk
    rival = {}

    def stall_and_take_over(context, hb):
        during_booking.remove(stall_and_take_over)
        hb.stop()  # the stall freezes the heartbeat too
        clock.advance(TTL + 1)
        rival["outcome"] = run_job("task", pk, owner="worker-b", clock=clock)

    during_booking.append(stall_and_take_over)
    assert run_job("task", pk, owner="worker-a", clock=clock) == "blocked"
    assert rival["outcome"] == "done"
    # Only the new owner's booking landed; the carrier saw one key twice and charged once.
    assert list(Booking.objects.values_list("written_by", flat=True)) == ["worker-b"]
    assert len(carrier.calls) == 2 and len(carrier.charges) == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value.startswith("CR-")
    assert result.worker_ids == ["worker-a", "worker-b"]
    (lost,) = result.errors
    assert lost.exception_class_path == "weave.leases.errors.LeaseLost" and "fence 2" in lost.traceback


def _drain_statements(n):
    TaskRow.objects.all().delete()
    for i in range(n):
        add.enqueue(i, 1)
    with CaptureQueriesContext(connection) as queries:
        assert drain() == {"done": n}
    return [q["sql"].lstrip() for q in queries if not q["sql"].lstrip().upper().startswith(("SAVEPOINT", "RELEASE"))]


def test_drain__a_batch_of_tasks_takes_the_same_statements_whatever_its_size():
    """One claim picks, claims and reads the whole batch; one guarded statement and one INSERT finish it."""
    # 36: inside one INSERT of attempt records on SQLite too (999 parameters, two a column a row, 13 columns)
    few, many = _drain_statements(3), _drain_statements(36)
    assert len(few) == len(many)
    on_tasks = [sql.upper() for sql in many if '"WEAVE_TASKROW"' in sql.upper()]
    claims = [sql for sql in on_tasks if sql.startswith("UPDATE") and "ATTEMPTS" in sql.split("WHERE")[0]]
    assert len(claims) == 1  # fewer rows than a batch: the queue was empty, no second claim
    finishes = [sql for sql in on_tasks if "UPDATE" in sql.split("SET")[0] and '"OWNER" = NULL' in sql]
    assert len(finishes) == 1
    inserts = [sql for sql in many if sql.upper().startswith("INSERT") and "WEAVE_JOBATTEMPT" in sql.upper()]
    assert len(inserts) == 1
    assert sum(sql.startswith("SELECT") for sql in on_tasks) == 0
    assert TaskRow.objects.filter(state="done").count() == 36


def test_run_next__passes_over_a_task_held_under_a_live_lease_and_says_when_none_is_left(clock):
    held, free = add.enqueue(1, 1), add.enqueue(2, 2)
    rows = {r.result_id: r for r in TaskRow.objects.all()}
    TaskRow.objects.claim(rows[held.id].pk, owner="other", ttl=TTL, clock=clock)
    due = TaskRow.objects.due(clock).order_by("pk")
    assert run_next("task", due, owner="me", clock=clock) == "done"
    assert run_next("task", due, owner="me", clock=clock) is None
    free.refresh()
    assert free.status == TaskResultStatus.SUCCESSFUL and free.worker_ids == ["me"] and free.attempts == 1
    assert TaskRow.objects.get(pk=rows[held.id].pk).owner == "other"  # untouched: still the holder's


def test_weave_explain_task__takes_the_result_id_django_gives_or_the_row_number():
    from io import StringIO

    from django.core.management import CommandError, call_command

    result = explode.enqueue()
    drain()
    pk = TaskRow.objects.get(result_id=result.id).pk
    by_result, by_number = StringIO(), StringIO()
    call_command("weave_explain", "task", result.id, stdout=by_result)
    call_command("weave_explain", "task", str(pk), stdout=by_number)
    assert by_result.getvalue() == by_number.getvalue()
    assert f"result {result.id}, row {pk}" in by_result.getvalue()
    assert "ValueError: no such parcel" in by_result.getvalue()
    with pytest.raises(CommandError, match="No task with id no-such-result"):
        call_command("weave_explain", "task", "no-such-result")

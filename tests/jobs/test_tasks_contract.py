"""What Django's documentation of `django.tasks` promises, checked on `WeaveBackend`.

Each test names the documented behaviour it checks: statuses, attempts counted from 1, worker ids,
errors with their tracebacks, the four times, the result API (sync and async), queues, priority,
deferral, async task functions and the three signals.
"""

import logging
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from tests.jobs.shipping.background import add, explode
from tests.jobs.shipping.contract import add_later, flaky, look_around, while_running
from weave.jobs.runner import run_job
from weave.models import JobAttempt, TaskRow
from weave.tasks import WeaveBackend
from weave.tasks.compat import (
    InvalidTaskError,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from weave.tasks.worker import drain

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_hooks():
    while_running.clear()
    yield
    while_running.clear()


@pytest.fixture
def signals():
    """Every task signal sent, as (name, sender, id, status)."""
    seen = []

    def receiver(name):
        def record(sender, task_result, **kwargs):
            seen.append((name, sender, task_result.id, task_result.status, list(task_result.worker_ids)))

        return record

    connected = [
        (signal, receiver(name))
        for name, signal in (("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished))
    ]
    for signal, record in connected:
        signal.connect(record, weak=False)
    yield seen
    for signal, record in connected:
        signal.disconnect(record)


def pk_of(result):
    return TaskRow.objects.get(result_id=result.id).pk


# --- the backend's features ----------------------------------------------------------------------------


def test_every_feature_flag_is_true():
    backend = task_backends["default"]
    assert isinstance(backend, WeaveBackend)
    assert backend.supports_defer is True
    assert backend.supports_async_task is True
    assert backend.supports_get_result is True
    assert backend.supports_priority is True


def test_async_task__an_async_function_runs_to_completion():
    result = add_later.enqueue(2, 40)
    assert drain() == {"done": 1}
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


# --- statuses, attempts, worker ids ----------------------------------------------------------------------


def test_status__ready_then_running_then_successful():
    seen = {}
    while_running.append(lambda context: seen.update(running=look_around.get_result(context.task_result.id).status))
    result = look_around.enqueue("first")
    assert result.status == TaskResultStatus.READY and not result.is_finished
    drain()
    result.refresh()
    assert seen["running"] == TaskResultStatus.RUNNING  # another reader sees it running, by its live lease
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value["status"] == TaskResultStatus.RUNNING  # the task's own view


def test_status__a_task_that_raises_has_failed():
    result = explode.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_attempt__counted_from_one_with_one_worker_id_per_attempt():
    result = look_around.enqueue("first")
    drain()
    result.refresh()
    seen = result.return_value
    assert seen["attempt"] == 1
    (worker,) = seen["worker_ids"]  # the running attempt's own worker is in the list
    assert result.attempts == 1 and result.worker_ids == [worker]
    assert JobAttempt.objects.get(job_id=str(pk_of(result))).owner == worker


def test_attempt__a_retried_task_counts_its_second_attempt_as_two(clock):
    result = flaky.enqueue()
    pk = pk_of(result)
    assert run_job("task", pk, owner="worker-1", clock=clock) == "retry"
    result.refresh()
    assert result.status == TaskResultStatus.READY  # "ready to be executed again"
    (error,) = result.errors
    assert error.exception_class is ConnectionError
    clock.advance(60)
    assert run_job("task", pk, owner="worker-2", clock=clock) == "done"
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 2
    assert result.attempts == 2 and result.worker_ids == ["worker-1", "worker-2"]
    assert len(result.errors) == 1  # the second attempt raised nothing


# --- errors ---------------------------------------------------------------------------------------------


def test_errors__the_traceback_is_the_real_multi_line_one():
    result = explode.enqueue()
    drain()
    result.refresh()
    (error,) = result.errors
    assert error.exception_class is ValueError
    lines = error.traceback.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: no such parcel"
    assert any("in explode" in line for line in lines) and "\\x0a" not in error.traceback


def test_errors__control_characters_in_a_message_are_escaped_but_lines_are_kept():
    from weave.sanitize import multiline_text

    text = multiline_text("Traceback:\n  line\tone\r\nValueError: a\x00b\x1b[31m\u2028")
    assert text == "Traceback:\n  line\tone\nValueError: a\\x00b\\x1b[31m\\u2028"
    assert multiline_text("x" * 50, limit=10) == "…" + "x" * 9


# --- times ----------------------------------------------------------------------------------------------


def test_times__enqueued_started_last_attempted_and_finished(clock):
    result = flaky.enqueue()
    assert result.enqueued_at is not None
    assert result.started_at is None and result.last_attempted_at is None and result.finished_at is None
    pk = pk_of(result)
    first = clock.current
    run_job("task", pk, owner="worker-1", clock=clock)
    clock.advance(60)
    second = clock.current
    run_job("task", pk, owner="worker-2", clock=clock)
    result.refresh()
    assert result.started_at == first  # the first attempt's start, by the database clock
    assert result.last_attempted_at == second
    assert result.finished_at == second  # the fake clock stands still during the attempt


# --- the result API -------------------------------------------------------------------------------------


def test_get_result__by_task_and_by_backend_and_refresh():
    result = add.enqueue(1, 2)
    drain()
    assert add.get_result(result.id).return_value == 3
    assert task_backends["default"].get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert result.status == TaskResultStatus.READY  # a result is a snapshot until refreshed
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3


def test_get_result__another_tasks_id_is_a_mismatch_and_an_unknown_id_does_not_exist():
    result = add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        explode.get_result(result.id)
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result("no-such-result")


def test_async_api__aenqueue_aget_result_and_arefresh():
    result = async_to_sync(add.aenqueue)(20, 22)
    assert result.status == TaskResultStatus.READY and TaskRow.objects.filter(result_id=result.id).exists()
    drain()
    fetched = async_to_sync(add.aget_result)(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 42
    async_to_sync(result.arefresh)()
    assert result.return_value == 42


# --- queues, priority, deferral -------------------------------------------------------------------------


def test_queue_name__a_task_runs_only_in_its_queues_drain(settings):
    settings.TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend", "QUEUES": ["default", "reports"]}}
    result = add.using(queue_name="reports").enqueue(1, 1)
    assert drain("default") == {}
    assert drain("reports") == {"done": 1}
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.task.queue_name == "reports"


def test_queue_name__a_queue_the_backend_does_not_have_is_refused():
    with pytest.raises(InvalidTaskError):
        add.using(queue_name="nowhere")


def test_priority__higher_runs_first():
    low, high, middle = (add.using(priority=p).enqueue(p, 0) for p in (-5, 50, 0))
    drain()
    order = sorted((JobAttempt.objects.get(job_id=str(pk_of(r))).pk, r.id) for r in (low, high, middle))
    assert [rid for _, rid in order] == [high.id, middle.id, low.id]


def test_defer__run_after_holds_the_task_until_its_time(clock):
    result = add.using(run_after=clock.current + timedelta(hours=1)).enqueue(1, 1)
    assert run_job("task", pk_of(result), clock=clock) == "not due"
    clock.advance(3601)
    assert run_job("task", pk_of(result), clock=clock) == "done"
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


# --- signals --------------------------------------------------------------------------------------------


def test_signals__enqueued_started_and_finished_with_the_result(signals):
    result = add.enqueue(2, 2)
    assert signals == [("enqueued", WeaveBackend, result.id, TaskResultStatus.READY, [])]
    drain()
    started, finished = signals[1:]
    assert started[:4] == ("started", WeaveBackend, result.id, TaskResultStatus.RUNNING)
    assert finished[:4] == ("finished", WeaveBackend, result.id, TaskResultStatus.SUCCESSFUL)
    assert len(started[4]) == 1 and finished[4] == started[4]  # the same worker, one attempt


def test_signals__a_failed_task_finishes_failed(signals):
    result = explode.enqueue()
    drain()
    assert [(name, status) for name, _, rid, status, _ in signals if rid == result.id] == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
    ]


def test_signals__a_failed_tasks_finish_is_sent_while_its_exception_is_handled(caplog):
    """Django's own receiver logs a failed task with `logger.exception`, as its workers send the signal while
    handling the task's exception: the log (and an error tracker reading it) gets the real traceback."""
    import sys

    handled = []

    def record(sender, task_result, **kwargs):
        handled.append((task_result.status, sys.exc_info()[1]))

    task_finished.connect(record, weak=False)
    try:
        with caplog.at_level(logging.INFO):
            result = explode.enqueue()
            ok = add.enqueue(1, 1)
            drain()
    finally:
        task_finished.disconnect(record)
    (failed,) = [error for status, error in handled if status == TaskResultStatus.FAILED]
    assert isinstance(failed, ValueError) and str(failed) == "no such parcel"
    assert [error for status, error in handled if status != TaskResultStatus.FAILED] == [None]
    (logged,) = [r for r in caplog.records if result.id in r.getMessage() and "FAILED" in r.getMessage()]
    assert logged.exc_info and logged.exc_info[1] is failed
    assert "NoneType: None" not in caplog.text
    ok.refresh()
    assert ok.status == TaskResultStatus.SUCCESSFUL


def test_signals__a_failed_tasks_logged_traceback_holds_no_configured_secret(caplog, settings):
    """The framework's receiver prints the failed task's exception; a configured secret quoted in its
    message is redacted from that text as from Weave's own log lines (the exception itself is untouched)."""
    from tests.jobs.shipping.background import refused

    settings.WEAVE = {**settings.WEAVE, "PUSH_TOKEN": "tok-0123456789abcdef"}
    with caplog.at_level(logging.INFO):
        result = refused.enqueue("tok-0123456789abcdef")
        drain()
    (logged,) = [r for r in caplog.records if result.id in r.getMessage() and "FAILED" in r.getMessage()]
    assert logged.exc_info and "tok-0123456789abcdef" in str(logged.exc_info[1])
    assert "PermissionError: the gateway refused our token [redacted]" in caplog.text
    assert "tok-0123456789abcdef" not in caplog.text


# --- enqueue's cost -------------------------------------------------------------------------------------


def test_enqueue__one_insert_per_task_and_one_drain_request_per_queue_per_commit(
    settings, django_capture_on_commit_callbacks
):
    settings.TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend", "QUEUES": ["default", "reports"]}}
    with django_capture_on_commit_callbacks() as callbacks:
        with transaction.atomic():
            for n in range(3):
                with CaptureQueriesContext(connection) as queries:
                    result = add.enqueue(n, 1)
                assert [q["sql"].split()[0].upper() for q in queries] == ["INSERT"]
                assert result.status == TaskResultStatus.READY and result.args == [n, 1]
            add.using(queue_name="reports").enqueue(9, 9)
            add.using(queue_name="reports").enqueue(9, 9)
    assert sorted(callback.queue_name for callback in callbacks) == ["default", "reports"]


def test_enqueue__a_rolled_back_savepoint_takes_its_drain_request_with_it(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        with transaction.atomic():
            try:
                with transaction.atomic():
                    add.enqueue(1, 1)
                    raise RuntimeError("the view failed")
            except RuntimeError:
                pass
            assert not TaskRow.objects.exists()
            add.enqueue(2, 2)
    assert [callback.queue_name for callback in callbacks] == ["default"]

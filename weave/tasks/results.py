"""A stored task, read back as the tasks framework's `TaskResult`: its status, value, errors and workers.

One attempt is one start of the task by one worker: `worker_ids` has one entry per attempt, in
order (the worker of an attempt that lost its lease included), so `TaskResult.attempts` and
`TaskContext.attempt` count from 1, as Django's documentation says.
"""

# Django 6's Task and TaskResult are not generic at run time (the backport's are): annotations stay unevaluated.
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from weave.leases import Clock, default_clock
from weave.models import JobAttempt, JobState, TaskRow
from weave.tasks.compat import Task, TaskError, TaskResult, TaskResultStatus
from weave.tasks.options import TaskCancelled, options_key
from weave.timeline import stamp

JOB_TYPE = "task"
LOST_LEASE = "weave.leases.errors.LeaseLost"


def load_task(path: str) -> Task[Any, Any]:
    """The `@task` object at dotted `path` (the decorated module-level function)."""
    found = import_string(path)
    if not isinstance(found, Task):
        raise TypeError(f"{path} is not a task (decorate it with @task).")
    return found


# Tasks as enqueued, by (path, priority, queue, backend, options): a drain runs many rows of one task,
# and `using()` validates against the backend each time. Tasks are frozen, so one copy serves all.
# Emptied when TASKS changes (the backends, and so their validation, change with it).
_stored: dict[tuple[Any, ...], Task[Any, Any]] = {}
_STORED_MAX = 1024


def stored_task(row: TaskRow) -> Task[Any, Any]:
    """The task of `row` as it was enqueued: its priority, queue, backend, defer time and Weave options."""
    deferred = row.next_attempt_at is not None and row.attempts == 0
    key = (row.task_path, row.priority, row.queue_name, row.backend, options_key(row.options))
    if not deferred:
        found = _stored.get(key)
        if found is not None:
            return found
    task = load_task(row.task_path)
    changes: dict[str, Any] = {"priority": row.priority, "queue_name": row.queue_name, "backend": row.backend}
    if deferred:
        changes["run_after"] = row.next_attempt_at
    if row.options and hasattr(task, "weave_options"):
        changes.update(row.options)
    stored = task.using(**changes)
    if not deferred:
        if len(_stored) >= _STORED_MAX:
            _stored.clear()
        _stored[key] = stored
    return stored


@receiver(setting_changed)
def _forget_stored_tasks(*, setting: str, **kwargs: Any) -> None:
    if setting == "TASKS":
        _stored.clear()


def _status(row: Any) -> TaskResultStatus:
    if row.state == JobState.DONE:
        return TaskResultStatus.SUCCESSFUL
    if row.state in (JobState.FAILED, JobState.CANCELLED, JobState.UNDOING):
        return TaskResultStatus.FAILED
    # Pending: running while a live lease holds it, ready otherwise (also after a lost or lapsed lease).
    return TaskResultStatus.RUNNING if getattr(row, "lease_live", False) else TaskResultStatus.READY


def _error(attempt: JobAttempt) -> TaskError:
    if attempt.outcome == JobAttempt.Outcome.BLOCKED:
        # The attempt lost its lease: recorded as such, with who took the task over.
        return TaskError(exception_class_path=LOST_LEASE, traceback=attempt.reason)
    return TaskError(exception_class_path=attempt.error_class or "builtins.Exception", traceback=attempt.traceback)


def _errors(row: TaskRow, attempts: list[JobAttempt]) -> list[TaskError]:
    """One error per attempt that did not succeed, then the cancel of a cancelled task: FAILED says why."""
    errors = [_error(a) for a in attempts if a.outcome != JobAttempt.Outcome.DONE]
    if row.state == JobState.CANCELLED:
        errors.append(
            TaskError(
                exception_class_path=f"{TaskCancelled.__module__}.{TaskCancelled.__qualname__}",
                traceback=(
                    f"{TaskCancelled.__name__}: cancelled at {stamp(row.finished_at)} (database time) by an "
                    f"operator; it does not run again. `manage.py weave_explain task {row.pk}` says who cancelled it."
                ),
            )
        )
    return errors


def attempts_of(row: TaskRow) -> list[JobAttempt]:
    """The recorded attempts of `row`, in order (a claim given back unstarted is none)."""
    return list(JobAttempt.objects.ran().filter(job_type=JOB_TYPE, job_id=str(row.pk)).order_by("number", "pk"))


def worker_ids(row: TaskRow, attempts: list[JobAttempt]) -> list[str]:
    """One worker id per attempt: the recorded ones, then the holder's while its attempt has no record yet."""
    ids = [a.owner for a in attempts]
    if row.owner is not None and not any(a.fence == row.fence for a in attempts):
        ids.append(row.owner)  # running now, or stopped without a finish (its lease lapsed)
    return ids


# How an attempt that recorded its finish leaves the task (the runner's outcome words).
_AFTER = {"done": TaskResultStatus.SUCCESSFUL, "failed": TaskResultStatus.FAILED, "retry": TaskResultStatus.READY}


def task_result(
    row: TaskRow,
    *,
    clock: Clock = default_clock,
    running: bool = False,
    finished: str = "",
    task: Task[Any, Any] | None = None,
    attempts: list[JobAttempt] | None = None,
) -> TaskResult[Any]:
    """Build the `TaskResult` of `row` from the row and its attempts (one error per attempt that did not succeed).

    `running`: the result as the worker holding the row sees it (RUNNING, its own attempt counted).
    `finished`: the outcome of the attempt that just recorded its finish, `row` being the row as that
    attempt claimed it (its finish time is its attempt's record's; nothing of the row is read again).
    `task` (the row's stored task) and `attempts` (its records, in order), when the caller has them.
    """
    if not (running or finished or hasattr(row, "lease_live")):
        row = TaskRow.objects.with_lease_state(clock).get(pk=row.pk)
    # A first attempt that is running has nothing recorded before it: no need to look.
    if attempts is None:
        attempts = [] if running and row.attempts == 1 else attempts_of(row)
    status = TaskResultStatus.RUNNING if running else _AFTER[finished] if finished else _status(row)
    result: TaskResult[Any] = TaskResult(
        task=task or stored_task(row),
        id=row.result_id,
        status=status,
        enqueued_at=row.created_at,
        **_times(row, attempts, finished_now=bool(finished) and status != TaskResultStatus.READY),
        args=list(row.args),
        kwargs=dict(row.kwargs),
        backend=row.backend,
        errors=_errors(row, attempts),
        worker_ids=worker_ids(row, attempts),
    )
    object.__setattr__(result, "_return_value", row.return_value)
    return result


def _times(row: TaskRow, attempts: list[JobAttempt], *, finished_now: bool) -> dict[str, Any]:
    """The result's start, latest attempt and finish times: the row's, else its attempts' records'.

    `finished_now`: the attempt that just recorded its finish ended the task; its record has the time.
    """
    first, last = (attempts[0], attempts[-1]) if attempts else (None, None)
    finished_at = row.finished_at
    if finished_now:
        finished_at = last.finished_at if last is not None else None
    return {
        "started_at": row.started_at or (first.started_at if first is not None else None),
        "last_attempted_at": row.last_attempted_at or (last.started_at if last is not None else None),
        "finished_at": finished_at,
    }


def enqueued_result(task: Task[Any, Any], row: Mapping[str, Any]) -> TaskResult[Any]:
    """The result of a task just inserted with the values `row`: READY, built from them (nothing read back)."""
    return TaskResult(
        task=task,
        id=row["result_id"],
        status=TaskResultStatus.READY,
        enqueued_at=row["created_at"],
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        args=list(row["args"]),
        kwargs=dict(row["kwargs"]),
        backend=row["backend"],
        errors=[],
        worker_ids=[],
    )

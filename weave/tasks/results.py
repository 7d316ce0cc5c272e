"""A stored task, read back as the tasks framework's `TaskResult`: its status, value, errors and workers."""

# Django 6's Task and TaskResult are not generic at run time (the backport's are): annotations stay unevaluated.
from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string

from weave.leases import Clock, default_clock
from weave.models import JobAttempt, JobState, TaskRow
from weave.tasks.compat import Task, TaskError, TaskResult, TaskResultStatus

JOB_TYPE = "task"


def load_task(path: str) -> Task[Any, Any]:
    """The `@task` object at dotted `path` (the decorated module-level function)."""
    found = import_string(path)
    if not isinstance(found, Task):
        raise TypeError(f"{path} is not a task (decorate it with @task).")
    return found


def _status(row: Any) -> TaskResultStatus:
    if row.state == JobState.DONE:
        return TaskResultStatus.SUCCESSFUL
    if row.state in (JobState.FAILED, JobState.CANCELLED):
        return TaskResultStatus.FAILED
    # Pending: running while a live lease holds it, ready otherwise (also after a lost or lapsed lease).
    return TaskResultStatus.RUNNING if getattr(row, "lease_live", False) else TaskResultStatus.READY


def _error(attempt: JobAttempt) -> TaskError:
    if attempt.outcome == JobAttempt.Outcome.BLOCKED:
        # The attempt lost its lease: recorded as such, with who took the task over.
        return TaskError(exception_class_path="weave.leases.errors.LeaseLost", traceback=attempt.reason)
    return TaskError(exception_class_path=attempt.error_class or "builtins.Exception", traceback=attempt.traceback)


def task_result(row: TaskRow, *, clock: Clock = default_clock) -> TaskResult[Any]:
    """Build the `TaskResult` of `row` from the row and its attempts (one error per attempt that did not succeed)."""
    if not hasattr(row, "lease_live"):
        row = TaskRow.objects.with_lease_state(clock).get(pk=row.pk)
    task = load_task(row.task_path).using(priority=row.priority, queue_name=row.queue_name, backend=row.backend)
    if row.next_attempt_at is not None and row.attempts == 0:
        task = task.using(run_after=row.next_attempt_at)
    attempts = list(JobAttempt.objects.filter(job_type=JOB_TYPE, job_id=str(row.pk)).order_by("number", "pk"))
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=row.result_id,
        status=_status(row),
        enqueued_at=row.created_at,
        started_at=attempts[0].started_at if attempts else None,
        last_attempted_at=attempts[-1].started_at if attempts else None,
        finished_at=row.finished_at,
        args=list(row.args),
        kwargs=dict(row.kwargs),
        backend=row.backend,
        errors=[_error(a) for a in attempts if a.outcome != JobAttempt.Outcome.DONE],
        worker_ids=[a.owner for a in attempts],
    )
    object.__setattr__(result, "_return_value", row.return_value)
    return result

"""Where `@task` functions run: a django-q2 task drains Weave's task table, one fenced attempt per task.

Workers are the site's `qcluster` processes; the drain is asked for through a coalesced request (as
the push drain is), by `enqueue`, by the due-time watcher (deferred tasks, lapsed leases) and by
the sweep.
"""

import time
from typing import Any

from weave import jobs
from weave.jobs import JobContext, JobType, RetryPolicy, register
from weave.jobs.runner import run_next
from weave.models import TaskRow
from weave.schedules import ScheduleSpec
from weave.tasks.compat import TaskContext, normalize_json
from weave.tasks.context import WeaveTaskContext
from weave.tasks.results import JOB_TYPE, load_task, task_result

DRAIN = "weave.tasks.drain"
DRAIN_BUDGET = 60.0  # seconds one drain starts new tasks for; the next drain carries on


def drain_request_name(queue_name: str) -> str:
    return jobs.request_name(f"{DRAIN}:{queue_name}")


def enqueue_drain(queue_name: str = "default") -> bool:
    """Ask the workers to drain `queue_name`, unless a drain for it is already waiting to start."""
    return jobs.request(drain_request_name(queue_name), "weave.tasks.worker.drain", queue_name, group=DRAIN)


def _due(queue_name: str) -> Any:
    return TaskRow.objects.due().filter(queue_name=queue_name).order_by("-priority", "next_attempt_at", "pk")


def drain(queue_name: str = "default", *, budget: float = DRAIN_BUDGET) -> dict[str, int]:
    """Run due tasks of `queue_name`, highest priority first, until none is due or the budget is spent."""
    ensure_registered()
    jobs.started(drain_request_name(queue_name))
    outcomes: dict[str, int] = {}
    ends = time.monotonic() + budget
    try:
        while time.monotonic() < ends:
            # One statement picks the next due task, claims it and reads it back (a task another
            # worker is claiming right now is passed over, not waited for).
            outcome = run_next(JOB_TYPE, _due(queue_name))
            if outcome is None:
                break
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        jobs.settled()
    if _due(queue_name).exists():
        enqueue_drain(queue_name)  # the budget ran out with work left: the next drain (maybe elsewhere) goes on
    return outcomes


def sweep() -> int:
    """Ask for a drain of every queue with due tasks (scheduled every minute; the watcher is usually first)."""
    queues = TaskRow.objects.due().values_list("queue_name", flat=True).distinct()
    return sum(1 for name in queues if enqueue_drain(name))


def _wake() -> None:
    for name in TaskRow.objects.due().values_list("queue_name", flat=True).distinct():
        enqueue_drain(name)


def run_task(ctx: JobContext) -> Any:
    """The job handler of a stored task: call the function (with a context if it takes one), keep its value."""
    row: TaskRow = ctx.job
    task = load_task(row.task_path)
    if row.takes_context:
        context: TaskContext = WeaveTaskContext(task_result=task_result(row, clock=ctx.clock), job=ctx)
        value = task.call(context, *row.args, **row.kwargs)
    else:
        value = task.call(*row.args, **row.kwargs)
    # Saved by the guarded finish (result_field): it lands only under the lease, like every write.
    return normalize_json(value)


def ensure_registered() -> None:
    """Register the "task" job type once (a site using `WeaveBackend` gets it; others never see it)."""
    try:
        jobs.get(JOB_TYPE)
    except LookupError:
        register(
            JobType(
                name=JOB_TYPE,
                model=TaskRow,
                handler=run_task,
                result_field="return_value",
                # django.tasks semantics: a task that raises has failed; lost leases are retried by takeover.
                retry=RetryPolicy(max_attempts=1),
                schedule=ScheduleSpec(name="weave.tasks.sweep", func="weave.tasks.worker.sweep", minutes=1),
                next_due=TaskRow.objects.next_due_at,
                wake=_wake,
            )
        )

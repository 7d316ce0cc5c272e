"""Where `@task` functions run: a django-q2 task drains Weave's task table, one fenced attempt per task.

Workers are the site's `qcluster` processes; the drain is asked for through a coalesced request (as
the push drain is), by `enqueue`, by the due-time watcher (deferred tasks, lapsed leases) and by
the sweep.

Every task runs under a heartbeat the engine keeps, with or without `takes_context`: it renews the
lease before the function starts, every TTL/3 while it runs and once more right before the finish,
up to the task's timeout. A task that returns after its timeout has failed; one that never returns
stops being renewed, loses its lease, and the attempts a takeover may start are bounded by
`max_attempts`.
"""

import threading
from collections.abc import Mapping
from typing import Any

from django.db.models import F
from django.db.models.functions import Coalesce

from weave import jobs
from weave.jobs import JobContext, JobType, RetryPolicy, get, register
from weave.jobs.takeover import TASK_NO_FINISH
from weave.jobs.tasks import drain_due
from weave.leases import Clock, FakeClock, Heartbeat, insert_receipts
from weave.leases.heartbeat import heartbeat_interval
from weave.models import JobAttempt, TaskRow
from weave.schedules import ScheduleSpec
from weave.tasks.compat import TaskContext, TaskResultStatus, normalize_json, task_finished, task_started
from weave.tasks.context import WeaveTaskContext
from weave.tasks.options import TaskOptions, TaskTimedOut, TooManyAttempts, options_key, resolve
from weave.tasks.results import JOB_TYPE, stored_task, task_result
from weave.timeline import clock_time
from weave.wake import request_name, request_task

DRAIN = "weave.tasks.drain"
DRAIN_BUDGET = 60.0  # seconds one drain starts new tasks for; the next drain carries on
_running = threading.local()


def drain_request_name(queue_name: str) -> str:
    return request_name(f"{DRAIN}:{queue_name}")


def enqueue_drain(queue_name: str = "default") -> bool:
    """Ask the workers to drain `queue_name`, unless a drain for it is already waiting to start."""
    return request_task(drain_request_name(queue_name), "weave.tasks.worker.drain", queue_name, group=DRAIN)


def drain(queue_name: str = "default", *, budget: float = DRAIN_BUDGET) -> dict[str, int]:
    """Run due tasks of `queue_name`, highest priority first, until none is due or the budget is spent.

    Batch by batch (`weave.jobs.batch`): one statement claims up to a batch of due tasks, each runs as
    its own fenced attempt, and their finishes are written in groups.
    """
    ensure_registered()
    due = TaskRow.objects.due().filter(queue_name=queue_name).order_by("-priority", "next_attempt_at", "pk")
    return drain_due(JOB_TYPE, drain_request_name(queue_name), due.all, lambda: enqueue_drain(queue_name), budget)


def sweep() -> int:
    """Ask for a drain of every queue with due tasks (scheduled every minute; the watcher is usually first)."""
    queues = TaskRow.objects.due().values_list("queue_name", flat=True).distinct()
    return sum(1 for name in queues if enqueue_drain(name))


def running_heartbeat() -> Heartbeat | None:
    """The engine's heartbeat of the task running in this thread (None between tasks)."""
    return getattr(_running, "heartbeat", None)


def task_options(row: TaskRow) -> TaskOptions:
    """The options `row` runs with: its own, then its backend's OPTIONS, then Weave's defaults."""
    return options_of(stored_task(row), row)


def options_of(task: Any, row: TaskRow) -> TaskOptions:
    """The options of `row`, whose stored task is `task` (resolved once per backend and stored options)."""
    backend = task.get_backend()
    cache: dict[str, TaskOptions] | None = getattr(backend, "resolved_options", None)
    if cache is None:
        return resolve(row.options, getattr(backend, "task_defaults", {}))
    key = options_key(row.options)
    found = cache.get(key)
    if found is None:
        found = cache[key] = resolve(row.options, getattr(backend, "task_defaults", {}))
    return found


def run_task(ctx: JobContext) -> Any:
    """The job handler of a stored task: call the function under the engine's heartbeat, keep its value."""
    row: TaskRow = ctx.job
    task = stored_task(row)
    options = options_of(task, row)
    overran = _record_lost_attempt(ctx, row, options) if row.previous_owner is not None else ""
    if overran:
        raise TaskTimedOut(overran)  # a timeout is the task's failure, as if the attempt had returned late
    if ctx.attempt > options.max_attempts:
        raise TooManyAttempts(
            f"not started again: this would be attempt {ctx.attempt} and max_attempts is {options.max_attempts}"
        )
    if options.lease_ttl is not None:
        ctx.ttl = options.lease_ttl  # the heartbeat's first renewal, before the function starts, sets it
    if ctx.batch is not None:
        # Batch mode: the batch's heartbeat renews this row with the others, up to the task's timeout.
        ctx.batch.start(ctx.lease, ttl=options.lease_ttl, budget=options.timeout)
        return _call(ctx, row, task, options, ctx.batch)
    # On a fake clock time moves only when a test moves it, so the test renews by hand
    # (`running_heartbeat().tick()`): the same renewals, without a thread racing the test.
    background = not isinstance(ctx.clock, FakeClock)
    heartbeat = Heartbeat(
        ctx.rows, ctx.lease, ttl=ctx.ttl, clock=ctx.clock, budget=options.timeout, background=background
    )
    with heartbeat:
        value = _call(ctx, row, task, options, heartbeat)
        heartbeat.before_save()  # renew right before the finish; a renewal that failed wins
    return value


def _call(ctx: JobContext, row: TaskRow, task: Any, options: TaskOptions, heartbeat: Any) -> Any:
    """Call the task's function (signalling its start), and fail it if it returned after its timeout."""
    backend = type(task.get_backend())
    result: Any = None  # built only for a receiver or the task's context
    if row.takes_context or task_started.has_listeners(backend):
        result = task_result(row, clock=ctx.clock, running=True, task=task)
        task_started.send(backend, task_result=result)
    began = ctx.clock.monotonic()
    _running.heartbeat = heartbeat
    try:
        if row.takes_context:
            context: TaskContext = WeaveTaskContext(task_result=result, job=ctx)
            value = task.call(context, *row.args, **row.kwargs)
        else:
            value = task.call(*row.args, **row.kwargs)
    finally:
        _running.heartbeat = None
    took = ctx.clock.monotonic() - began
    if took > options.timeout:
        raise TaskTimedOut(f"ran past its timeout of {options.timeout:g} s (took {took:.1f} s)")
    # Saved by the guarded finish (result_field): it lands only under the lease, like every write.
    return normalize_json(value)


def _record_lost_attempt(ctx: JobContext, row: TaskRow, options: TaskOptions) -> str:
    """A takeover: record the attempt before, which lost its lease without a finish, unless it recorded that itself.

    Return why that attempt counts as timed out ("" if it does not): its heartbeat renewed it up to
    its timeout, so it was still running then.
    """
    if row.previous_owner is None or row.previous_fence is None:
        return ""
    number = ctx.attempt - 1
    overran = _overran(row, options)
    done = JobAttempt.objects.filter(job_type=JOB_TYPE, job_id=str(row.pk), number=number, fence=row.previous_fence)
    if done.exists():
        return overran
    why = overran or _stopped_why(row, options)
    # Begins as `weave.jobs.takeover` knows a task's guess, so that a worker that only stalled puts its own
    # account in its place when it wakes up.
    reason = (
        f"{TASK_NO_FINISH} {clock_time(row.previous_expires_at)} without a finish ({why}). "
        f"The task is now held by {ctx.lease.owner} at fence {ctx.lease.fence}."
    )
    receipt = {
        "job_type": JOB_TYPE,
        "job_id": str(row.pk),
        "number": number,
        "owner": row.previous_owner,
        "fence": row.previous_fence,
        "outcome": JobAttempt.Outcome.BLOCKED,
        "reason": reason,
        "error_class": "",
        "traceback": "",
        "result": None,
        "started_at": row.previous_attempted_at or row.previous_expires_at,
        # Dated when written, as a job's takeover record is (the reason keeps the lapse): dated back to
        # the lapse, a late takeover's record fell before what the metrics' totals had kept already.
        "finished_at": ctx.clock.now(),
    }
    insert_receipts(JobAttempt, [receipt])
    return overran


def _overran(row: TaskRow, options: TaskOptions) -> str:
    """Why the lost attempt counts as timed out: its heartbeat renewed it up to its timeout ("" if not).

    The heartbeat renews every interval until the timeout, so an attempt whose last renewal (its lapse
    less the TTL) came within the last interval before the timeout was still running at the timeout.
    """
    began, lapsed = row.previous_attempted_at, row.previous_expires_at
    if began is None or lapsed is None:
        return ""
    ttl = options.lease_ttl or get(JOB_TYPE).lease_ttl()
    renewed_for = (lapsed - began).total_seconds() - ttl
    if renewed_for < options.timeout - heartbeat_interval(ttl):
        return ""
    return f"attempt {row.attempts - 1} was still running at its timeout of {options.timeout:g} s"


def q_cluster_timeout() -> float | None:
    """Q_CLUSTER['timeout']: django-q2 stops a drain that runs longer (None when not set)."""
    from django.conf import settings

    timeout = (getattr(settings, "Q_CLUSTER", None) or {}).get("timeout")
    return float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None


def _stopped_why(row: TaskRow, options: TaskOptions) -> str:
    """Why an attempt lapsed without a finish, short of its timeout: its worker stopped.

    A task whose timeout cannot fit in Q_CLUSTER['timeout'] after a drain's budget is stopped with its
    drain by django-q2 before it can finish; when the attempt was still renewing by then, say so, or
    the operator reads "crashed" on every attempt of a task that can never finish.
    """
    q_timeout = q_cluster_timeout()
    began, lapsed = row.previous_attempted_at, row.previous_expires_at
    if q_timeout is None or began is None or lapsed is None or options.timeout + DRAIN_BUDGET <= q_timeout:
        return "the worker stopped, crashed or stalled"
    # Claimed within a drain's budget, an attempt whose lease held this long may have met the drain's end.
    if (lapsed - began).total_seconds() < q_timeout - DRAIN_BUDGET:
        return "the worker stopped, crashed or stalled"
    return (
        f"the worker stopped, likely at Q_CLUSTER['timeout'] ({q_timeout:g} s), where django-q2 stops the drain "
        f"running it: the task's timeout of {options.timeout:g} s does not fit in it after a drain's "
        f"{DRAIN_BUDGET:g} s of starting tasks"
    )


def _claim_fields(clock: Clock) -> Mapping[str, Any]:
    # In the claim's own statement, besides the latest claim's time and the previous holder (which the
    # core writes for every JobModel): the first start, kept by later claims.
    return {"started_at": Coalesce(F("started_at"), clock.now())}


def _policy(row: TaskRow) -> RetryPolicy:
    return task_options(row).policy()


def _finished(ctx: JobContext, outcome: str) -> None:
    """Tell `task_finished` receivers how the attempt ended (the row is not read again: the drain's reads stay one)."""
    _finished_many([(ctx, outcome, None)])


def _finished_many(ended: list[tuple[JobContext, str, dict[str, Any] | None]]) -> None:
    """Tell `task_finished` receivers how each attempt of a written group ended.

    A first attempt's only record is the one just written (`record`, as stored); the records of a
    task with earlier attempts are read, all in one statement.
    """
    listening = [item for item in ended if task_finished.has_listeners(_backend_class(item[0].job))]
    if not listening:
        return
    attempts: dict[str, list[JobAttempt]] = {}
    for ctx, _, record in listening:
        if record is not None and ctx.attempt == 1:
            attempts[str(ctx.job.pk)] = [JobAttempt(**record)]
    earlier = [str(ctx.job.pk) for ctx, _, _ in listening if str(ctx.job.pk) not in attempts]
    if earlier:
        for attempt in JobAttempt.objects.ran().filter(job_type=JOB_TYPE, job_id__in=earlier).order_by("number", "pk"):
            attempts.setdefault(attempt.job_id, []).append(attempt)
    for ctx, outcome, _ in listening:
        row: TaskRow = ctx.job
        if outcome == "done":
            row.return_value = ctx.results.get("run")
        result = task_result(row, clock=ctx.clock, finished=outcome, attempts=attempts.get(str(row.pk), []))
        _send_finished(result, ctx.error if result.status == TaskResultStatus.FAILED else None)


def _send_finished(result: Any, error: BaseException | None) -> None:
    """Send `task_finished`; for a failed task, while its exception is being handled.

    Django's own receiver logs a failed task with `logger.exception`, as its workers send the signal from
    the task's `except` block: sent anywhere else, the log shows "NoneType: None" instead of the traceback
    and error trackers get no exception. The finish was written by then; the exception is raised again
    only to be the one handled.
    """
    if error is None:
        task_finished.send(type(result.task.get_backend()), task_result=result)
        return
    try:
        raise error
    except BaseException:  # noqa: BLE001  (exactly the one raised above)
        task_finished.send(type(result.task.get_backend()), task_result=result)


def _backend_class(row: TaskRow) -> type:
    return type(stored_task(row).get_backend())


def _unclaim(row: TaskRow) -> dict[str, Any] | None:
    """What giving back a claimed, never started task restores (its claim's times).

    None for a takeover: running it records the attempt that lost its lease, which giving it back would forget.
    """
    if row.previous_owner is not None:
        return None
    return {
        "started_at": row.started_at if row.previous_attempted_at else None,
        "last_attempted_at": row.previous_attempted_at,
    }


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
                # django.tasks semantics: a task that raises has failed, unless its options list the error.
                retry=RetryPolicy(max_attempts=1),
                retry_for=_policy,
                claim_fields=_claim_fields,
                finished=_finished,
                finished_many=_finished_many,
                unclaim_fields=_unclaim,
                records_takeovers=True,  # run_task records it, with whether it ran past its timeout
                schedule=ScheduleSpec(name="weave.tasks.sweep", func="weave.tasks.worker.sweep", minutes=1),
                next_due=TaskRow.objects.next_due_at,
                wake=sweep,
                explainer=_explain,
                explain_as=JOB_TYPE,
            )
        )


def _explain(key: Any) -> Any:
    from weave.tasks.explain import explain_task

    return explain_task(key)

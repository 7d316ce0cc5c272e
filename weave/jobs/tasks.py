"""django-q2 entry points for the job types the core drains: a drain per job type, and the sweep."""

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from weave.conf import setting, weave_settings
from weave.jobs import queue
from weave.jobs.batch import Report, run_batches
from weave.jobs.declaration import JobType, get, job_types
from weave.jobs.runner import run_job
from weave.wake import LingeringTask, request_name, request_started, tell_watchers

# Seconds one drain starts new jobs for; the next drain carries on. Well inside the Q_CLUSTER timeout,
# which must also cover the longest attempt started just before the end (its type's `budget`).
DRAIN_BUDGET = 30.0


def drain(job_type: str, *, budget: float = DRAIN_BUDGET) -> Mapping[str, Any]:
    """Run due jobs of `job_type` in batches until none is due or the budget is spent; return their outcomes.

    A type with its own `attempt` runs one attempt per drain instead (`drain_one`), and a type with its
    own pipeline runs that (`drain_pipeline`)."""
    declared = get(job_type)
    if declared.attempt is not None:
        return drain_one(declared)
    if declared.pipeline is not None:
        return drain_pipeline(declared)
    model: Any = declared.model
    due = model._default_manager.due().order_by("next_attempt_at", "pk")
    undo = model._default_manager.undo_due().order_by("next_attempt_at", "pk")

    def ask() -> None:
        queue.enqueue_drain(job_type)

    return drain_due(job_type, queue.drain_request_name(job_type), due.all, ask, budget, undo=undo.all)


def drain_due(
    job_type: str,
    request: str,
    due: Callable[[], Any],
    ask: Callable[[], object],
    budget: float,
    *,
    undo: Callable[[], Any] | None = None,
) -> dict[str, int]:
    """Drain for request `request`: run the rows `undo()` (if given) then `due()` of `job_type` in batches
    until none is left or the budget is spent, and `ask()` for another drain where more is left; return the
    outcomes."""
    request_started(request)
    ends = time.monotonic() + budget
    undone = Report()
    try:
        # The undos an operator asked for first (few, and waited for): a backlog never holds them back.
        if undo is not None and undo().exists():
            undone = run_batches(job_type, undo(), budget=budget)
        left = max(0.0, ends - time.monotonic())
        # A whole batch claimed: more may be due, so another worker is asked to drain beside this one.
        report = run_batches(job_type, due(), budget=left, on_full=ask)
    finally:
        tell_watchers()
    for outcome, n in undone.outcomes.items():
        report.count(outcome, n)
    if (report.more or undone.more or not left) and (due().exists() or (undo is not None and undo().exists())):
        ask()  # the budget ran out with work left: the next drain (maybe elsewhere) goes on
    return report.outcomes


# Rows one drain tries before it gives up finding one it can claim: each refusal means another worker
# holds that row (or it needed no worker after all), and that worker's drain goes on from there.
CANDIDATES = 10


def drain_one(declared: JobType) -> dict[str, int]:
    """One attempt at the first row `declared.due_rows()` offers that this drain can claim.

    An attempt may work as long as its type's own budget, as a task per row did, so one drain runs one
    attempt: while another row is due, it first asks for a helper, so due rows spread over the workers.
    Return the outcomes, the rows found held by others ("busy", "not_claimable") included."""
    request_started(queue.drain_request_name(declared.name))
    assert declared.attempt is not None and declared.due_rows is not None
    outcomes: Counter[str] = Counter()
    outcome = ""
    try:
        candidates = list(declared.due_rows().values_list("pk", flat=True)[:CANDIDATES])
        if len(candidates) > 1:
            queue.enqueue_drain(declared.name)
        for pk in candidates:
            outcome = declared.attempt(pk)
            outcomes[outcome] += 1
            if outcome not in ("busy", "not_claimable"):
                break  # this drain's one attempt ran (or its claim was cut off): the helpers take the rest
    finally:
        tell_watchers()
    # More due (a row given back due at once, a helper's ask lost): ask again. After a cut-off claim the
    # database is away; the watchers ask once it answers.
    if outcome != "cut_off" and declared.has_due_rows():
        queue.enqueue_drain(declared.name)
    return dict(outcomes)


def drain_pipeline(declared: JobType) -> Mapping[str, Any]:
    """Run the pipeline of `declared` once, lingering WAKE_LINGER seconds for new rows on its open loop and
    connections: steady traffic needs one task per budget, not one per row. Return what it reports."""
    assert declared.pipeline is not None and declared.due_rows is not None and declared.batch_setting
    name = queue.drain_request_name(declared.name)
    task = LingeringTask(name, declared.registry_key, float(weave_settings.WAKE_LINGER))
    backlog = declared.due_rows()[int(setting(declared.batch_setting)) :].exists()
    task.begin(backlog=backlog)  # a backlog frees the slot, so the next request asks for a helper
    if backlog:
        queue.enqueue_drain(declared.name)
    try:
        return declared.pipeline(task)
    finally:
        # Free the slot (unless a helper's request holds it), then look once more: a row committed after
        # this look finds the slot free, or reaches the helper.
        task.end()
        if declared.has_due_rows():
            queue.enqueue_drain(declared.name)
        tell_watchers()  # due times changed (retries, released rows)


def run(job_type: str, pk: Any) -> str:
    """Run one attempt at job `pk` of `job_type` (the per-job task of earlier versions, still queued somewhere)."""
    request_started(request_name(f"weave.jobs:{job_type}:{pk}"), forget=True)
    try:
        return run_job(job_type, pk)
    finally:
        tell_watchers()


def sweep() -> int:
    """Ask for a drain of every core-run job type with due jobs (scheduled every minute); return how many."""
    swept = [jt for jt in job_types() if jt.drained and jt.schedule and jt.schedule.func == "weave.jobs.tasks.sweep"]
    return sum(queue.enqueue_due(jt) for jt in swept)

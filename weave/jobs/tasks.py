"""django-q2 entry points for core-run job types: a drain per job type, and the sweep."""

from collections.abc import Callable
from typing import Any

from weave.jobs import queue
from weave.jobs.batch import run_batches
from weave.jobs.declaration import get, job_types
from weave.jobs.runner import run_job
from weave.wake import request_name, request_started, tell_watchers

# Seconds one drain starts new jobs for; the next drain carries on. Well inside the Q_CLUSTER timeout,
# which must also cover the longest attempt started just before the end (its type's `budget`).
DRAIN_BUDGET = 30.0


def drain(job_type: str, *, budget: float = DRAIN_BUDGET) -> dict[str, int]:
    """Run due jobs of `job_type` in batches until none is due or the budget is spent; return their outcomes."""
    model: Any = get(job_type).model
    due = model._default_manager.due().order_by("next_attempt_at", "pk")
    return drain_due(
        job_type, queue.drain_request_name(job_type), due.all, lambda: queue.enqueue_drain(job_type), budget
    )


def drain_due(
    job_type: str, request: str, due: Callable[[], Any], ask: Callable[[], object], budget: float
) -> dict[str, int]:
    """Drain for request `request`: run the rows `due()` of `job_type` in batches until none is due or the
    budget is spent, and `ask()` for another drain where more is left; return the outcomes."""
    request_started(request)
    try:
        # A whole batch claimed: more may be due, so another worker is asked to drain beside this one.
        report = run_batches(job_type, due(), budget=budget, on_full=ask)
    finally:
        tell_watchers()
    if report.more and due().exists():
        ask()  # the budget ran out with work left: the next drain (maybe elsewhere) goes on
    return report.outcomes


def run(job_type: str, pk: Any) -> str:
    """Run one attempt at job `pk` of `job_type` (the per-job task of earlier versions, still queued somewhere)."""
    request_started(request_name(f"weave.jobs:{job_type}:{pk}"), forget=True)
    try:
        return run_job(job_type, pk)
    finally:
        tell_watchers()


def sweep() -> int:
    """Ask for a drain of every core-run job type with due jobs (scheduled every minute); return how many."""
    swept = [jt for jt in job_types() if jt.runnable and jt.schedule and jt.schedule.func == "weave.jobs.tasks.sweep"]
    return sum(queue.enqueue_due(jt.name, jt.model) for jt in swept)

"""Thin django-q2 entry points for core-run job types: one attempt per task, and the sweep."""

from typing import Any

from weave.jobs import queue
from weave.jobs.declaration import job_types
from weave.jobs.runner import run_job


def run(job_type: str, pk: Any) -> str:
    """Run one attempt at job `pk` of `job_type`; return its outcome for the task result."""
    # The request row is per job: drop it, so a later request (a retry's due time) queues a new task.
    queue.started(queue.job_request_name(job_type, pk), forget=True)
    try:
        return run_job(job_type, pk)
    finally:
        queue.settled()


def sweep() -> int:
    """Ask for an attempt at every due job of every core-run job type (scheduled every minute); return how many."""
    return sum(queue.enqueue_due(jt.name, jt.model) for jt in job_types() if jt.runnable)

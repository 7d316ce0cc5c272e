"""Thin django-q2 entry points for onboarding.

`onboarding.tasks.sweep` runs every minute from the django-q2 Schedule: it re-enqueues pending runs
and runs whose lease expired. The due-time watcher normally gets there first.
"""

from onboarding import queue
from onboarding.runner import run_onboarding as run
from onboarding.services import onboarding_sweep
from weave.workers import request_started


def run_onboarding(run_id: int) -> str:
    """Run one attempt at `run_id`; return its outcome for the task result."""
    # The request row is per run: drop it, so a later request (a retry's due time) queues a new task;
    # and wake the watchers: the run is about to be leased, and they should know when that lease ends.
    request_started(queue.request_name(run_id), forget=True)
    return run(run_id)


def sweep() -> int:
    """Enqueue runs that need a worker; return how many."""
    return len(onboarding_sweep())

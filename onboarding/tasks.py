"""django-q2 entry points for onboarding; `sweep` runs every minute, a safety net for the watcher."""

from onboarding import queue
from onboarding.runner import run_onboarding as run
from onboarding.services import onboarding_sweep
from weave.workers import request_started


def run_onboarding(run_id: int) -> str:
    """Run one attempt at `run_id`; return its outcome for the task result."""
    # The request row is per run: dropped, so a later request (a retry's due time) queues a new task.
    request_started(queue.request_name(run_id), forget=True)
    return run(run_id)


def sweep() -> int:
    """Enqueue runs that need a worker (pending, or whose lease expired); return how many."""
    return len(onboarding_sweep())

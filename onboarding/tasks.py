"""Thin django-q2 entry points for onboarding.

`onboarding.tasks.sweep` runs every minute from the django-q2 Schedule: it re-enqueues pending runs
and runs whose lease expired.
"""

from onboarding.runner import run_onboarding as run
from onboarding.services import onboarding_sweep


def run_onboarding(run_id: int) -> str:
    """Run one attempt at `run_id`; return its outcome for the task result."""
    return run(run_id)


def sweep() -> int:
    """Enqueue runs that need a worker; return how many."""
    return len(onboarding_sweep())

"""django-q2 entry points for onboarding; `sweep` runs every minute, a safety net for the watcher."""

from onboarding.runner import run_onboarding as run
from onboarding.services import onboarding_sweep
from weave.workers import request_name, request_started


def run_onboarding(run_id: int) -> str:
    """Run one attempt at `run_id` (a task per run, queued before runs were drained by the engine)."""
    # That task's request row was per run: dropped, so it does not linger.
    request_started(request_name(f"onboarding.run:{run_id}"), forget=True)
    return run(run_id)


def sweep() -> int:
    """Ask for attempts at the runs that need a worker (pending, or whose lease expired); return how many."""
    return len(onboarding_sweep())

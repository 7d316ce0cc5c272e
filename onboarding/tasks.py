"""Thin django-q2 entry points for onboarding.

`onboarding.tasks.sweep` is meant for a django-q2 Schedule (e.g. every minute): it re-enqueues
pending runs and runs whose lease expired.
"""

from django_q.tasks import async_task


def enqueue_run(run_id: int) -> None:
    """Ask the workers to run one attempt at onboarding run `run_id`."""
    async_task("onboarding.tasks.run_onboarding", run_id, group="onboarding")


def run_onboarding(run_id: int) -> str:
    """Run one attempt at `run_id`; return its outcome for the task result."""
    from onboarding.runner import run_onboarding as run

    return run(run_id)


def sweep() -> int:
    """Enqueue runs that need a worker; return how many."""
    from onboarding.services import onboarding_sweep

    return len(onboarding_sweep())


def ensure_sweep_schedule(*, minutes: int = 1) -> None:
    """Create or update the django-q2 Schedule that runs `sweep` every `minutes` minutes."""
    from django_q.models import Schedule

    Schedule.objects.update_or_create(
        name="onboarding.sweep",
        defaults={"func": "onboarding.tasks.sweep", "schedule_type": Schedule.MINUTES, "minutes": minutes},
    )

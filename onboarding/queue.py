"""Enqueue one onboarding attempt. A leaf: the broker API and the task's dotted name, nothing else.

The runner and the services re-enqueue through here, so neither imports the task module that
imports them.
"""

from django_q.tasks import async_task


def enqueue_run(run_id: int) -> None:
    """Ask the workers to run one attempt at onboarding run `run_id`."""
    async_task("onboarding.tasks.run_onboarding", run_id, group="onboarding")

"""Ask for an onboarding attempt: a leaf that the runner and the services import."""

from weave.jobs import enqueue_job


def enqueue_run(run_id: int) -> bool:
    """Ask for an attempt at run `run_id`: a drain of onboarding runs, coalesced by the engine, which runs
    the run due longest and asks for helpers while more are due. Return whether one was enqueued."""
    return enqueue_job("onboarding", run_id)

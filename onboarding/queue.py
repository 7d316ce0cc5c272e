"""Ask for one onboarding attempt: a leaf that the runner, the services and the watcher import."""

from weave.workers import request_name as queue_request_name
from weave.workers import request_task


def request_name(run_id: int) -> str:
    return queue_request_name(f"onboarding.run:{run_id}")


def enqueue_run(run_id: int) -> bool:
    """Ask for one attempt at run `run_id` unless one is already waiting; return whether it was enqueued."""
    return request_task(request_name(run_id), "onboarding.tasks.run_onboarding", run_id, group="onboarding")

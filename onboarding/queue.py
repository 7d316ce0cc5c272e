"""Ask for one onboarding attempt. A leaf: the broker API, the task's dotted name and Weave's wake-up rows.

The runner, the services and the due-time watcher ask through here, so none of them imports the task
module that imports them.
"""

from weave.workers import request_name as queue_request_name
from weave.workers import request_task


def request_name(run_id: int) -> str:
    return queue_request_name(f"onboarding.run:{run_id}")


def enqueue_run(run_id: int) -> bool:
    """Ask the workers to run one attempt at onboarding run `run_id`, unless one is already waiting to start.

    Coalesced per run through Weave's own row (`weave.workers.request_task`): the sweep, the watcher and a
    person pressing "resume" can all ask at once and one task is queued. Returns whether it was.
    """
    return request_task(request_name(run_id), "onboarding.tasks.run_onboarding", run_id, group="onboarding")

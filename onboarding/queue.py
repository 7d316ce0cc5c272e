"""Ask for one onboarding attempt. A leaf: the broker API, the task's dotted name and Weave's wake-up rows.

The runner, the services and the due-time watcher ask through here, so none of them imports the task
module that imports them.
"""

from django_q.conf import Conf
from django_q.tasks import async_task

from weave import wake


def request_name(run_id: int) -> str:
    return f"onboarding.run:{run_id}@{Conf.CLUSTER_NAME}"


def enqueue_run(run_id: int) -> bool:
    """Ask the workers to run one attempt at onboarding run `run_id`, unless one is already waiting to start.

    Coalesced per run through Weave's own row (`weave.wake.request_once`): the sweep, the watcher and a
    person pressing "resume" can all ask at once and one task is queued. Returns whether it was.
    """
    return wake.request_once(
        request_name(run_id), enqueue=lambda: async_task("onboarding.tasks.run_onboarding", run_id, group="onboarding")
    )

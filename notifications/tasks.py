"""django-q2 entry points for the notifications app: the work lives in `delivery`."""

from typing import Any

from notifications import queue
from notifications.backends.registry import prepare_backends
from notifications.delivery import drain as run_drain
from notifications.delivery.worker import Lingering
from notifications.models import Notification
from weave import workers
from weave.conf import weave_settings


def drain() -> dict[str, Any]:
    """Deliver due notifications, then linger WAKE_LINGER seconds for new rows on the same loop and
    provider connections: steady traffic needs one task per PUSH_BUDGET, not one per notification."""
    task = workers.LingeringTask(queue.drain_request_name(), queue.JOB_KEY, float(weave_settings.WAKE_LINGER))
    backlog = Notification.objects.claimable()[weave_settings.PUSH_BATCH_SIZE :].exists()
    task.begin(backlog=backlog)  # a backlog frees the slot, so the next request asks for a helper
    if backlog:
        queue.enqueue_drain()
    try:
        lingering = Lingering(seconds=task.seconds, poll=task.poll, task=task)
        return run_drain(enqueue_more=False, linger=lingering).as_dict()
    finally:
        # Free the slot, then look once more: a row committed after this look finds the slot free.
        workers.free_slot(task.name)
        if Notification.objects.claimable().exists():
            queue.enqueue_drain()
        workers.tell_watchers()  # due times changed (retries, released rows)


def warm_up(**_signal: Any) -> None:
    """Import and ready what a drain needs once per worker process (`post_spawn`), so a new worker's first
    drain does not wait; no backend is built here: backends belong to the drain's own event loop."""
    prepare_backends()  # a problem is the drain's (and the checks') to report
    workers.settle_heap(collect=False)  # the one collection is the process start's (`weave.heap`)


def sweep() -> dict[str, Any]:
    """Pick up expired leases and due retries (scheduled every minute): a safety net for the watchers."""
    return drain()

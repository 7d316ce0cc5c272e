"""django-q2 entry points for the notifications app: the work lives in `delivery`."""

from collections.abc import Mapping
from typing import Any

from notifications import queue
from notifications.backends.registry import prepare_backends
from notifications.delivery import drain as run_drain
from notifications.delivery.worker import Lingering
from weave import jobs, workers


def drain() -> Mapping[str, Any]:
    """Run a push drain here and now: the engine's drain of the notification job type, which lingers
    WAKE_LINGER seconds for new rows (`deliver_due`). Tasks queued before the engine drained push name it."""
    return jobs.drain(queue.JOB)


def deliver_due(task: Any) -> dict[str, Any]:
    """The push pipeline, for one drain: deliver due notifications, then linger for new rows on the same
    loop and provider connections, as `task` (the drain's `weave.workers.LingeringTask`) allows."""
    lingering = Lingering(seconds=task.seconds, poll=task.poll, task=task)
    return run_drain(enqueue_more=False, linger=lingering).as_dict()


def warm_up(**_signal: Any) -> None:
    """Import and ready what a drain needs once per worker process (`post_spawn`), so a new worker's first
    drain does not wait; no backend is built here: backends belong to the drain's own event loop."""
    prepare_backends()  # a problem is the drain's (and the checks') to report
    workers.settle_heap(collect=False)  # the one collection is the process start's (`weave.heap`)


def sweep() -> Mapping[str, Any]:
    """Pick up expired leases and due retries (scheduled every minute): a safety net for the watchers."""
    return drain()

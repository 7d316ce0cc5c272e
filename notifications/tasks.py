"""Thin django-q2 entry points for the notifications app: the work lives in `delivery`."""

from typing import Any

from notifications import queue
from notifications.delivery import drain as run_drain
from notifications.models import Notification
from weave import jobs
from weave.conf import weave_settings


def drain() -> dict[str, Any]:
    """Deliver due notifications (the django-q2 task a coalesced request enqueues)."""
    # Free the request slot first (rows created from now on ask for another drain, so none waits for
    # us) and wake the watchers: rows are about to be leased, and those leases lapse if this worker dies.
    jobs.started(queue.drain_request_name())
    if Notification.objects.claimable()[weave_settings.PUSH_BATCH_SIZE :].exists():
        # More than one batch is due: ask for another drain, which asks for the next, until every
        # worker has one (each request is coalesced, so at most one drain waits in the broker).
        queue.enqueue_drain()
    try:
        return run_drain().as_dict()
    finally:
        # Due times changed (retries, released rows): the watchers sleep until the new earliest one.
        jobs.settled()


def sweep() -> dict[str, Any]:
    """Pick up expired leases and due retries even when nothing new arrives (scheduled every minute).

    A safety net: the watchers normally wake a drain at each due time within a second.
    """
    return drain()

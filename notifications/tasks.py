"""Thin django-q2 entry points for the notifications app: the work lives in `delivery`."""

import functools
import time
from typing import Any

from notifications import queue
from notifications.backends.registry import prepare_backends
from notifications.delivery import drain as run_drain
from notifications.delivery.worker import DeliveryReport, Lingering
from notifications.models import Notification
from weave import workers
from weave.conf import weave_settings


def drain() -> dict[str, Any]:
    """Deliver due notifications (the django-q2 task a coalesced request enqueues).

    One drain covers the rows that arrive while it runs: it holds the request slot, and once nothing is
    left it keeps looking for new rows for WAKE_LINGER seconds before it ends. Steady traffic then
    needs a constant number of broker tasks (about one per PUSH_BUDGET), not one per notification.
    """
    name = queue.drain_request_name()
    linger = float(weave_settings.WAKE_LINGER)
    backlog = Notification.objects.claimable()[weave_settings.PUSH_BATCH_SIZE :].exists()
    if backlog or not linger:
        # Free the slot: more than one batch is due, so ask for a helper on another worker (which asks
        # for the next, until every worker has one; each request is coalesced).
        workers.free_slot(name)
    else:
        workers.keep_slot_taken(name, _slot_time(linger))
    # Wake the watchers: they learn that rows are about to be leased, and so when those leases lapse
    # if this worker dies.
    workers.tell_watchers()
    if backlog:
        queue.enqueue_drain()
    try:
        return _drain_and_linger(name, linger).as_dict()
    finally:
        # Stop covering new rows, then look once more: a row committed before this look is seen here,
        # one committed after it finds the slot free and asks for its own drain.
        workers.free_slot(name)
        if Notification.objects.claimable().exists():
            queue.enqueue_drain()
        # Due times changed (retries, released rows): the watchers sleep until the new earliest one.
        workers.tell_watchers()


def _drain_and_linger(name: str, linger: float) -> DeliveryReport:
    slot = _SlotKeeper(name, linger)
    # One drain for the whole task, lingering: the rows that arrive while it waits go out on its loop,
    # through its open provider connections, not through a new drain built for each.
    lingering = Lingering(
        seconds=linger,
        # Only a safety net on PostgreSQL, where this process's watcher hears each new request at once;
        # on SQLite (or behind a transaction pooler) it is how new rows are found.
        poll=max(0.02, float(weave_settings.WAKE_GRACE) / 2),
        listen=workers.on_arrival,
        heard=_arrivals_heard,
        turn=slot.renew,
        # Wake the watchers: they learn that rows are leased again, and so when those leases lapse if
        # this worker dies.
        claimed=workers.tell_watchers,
        # A backlog: this loop claims every due row as it has room, lapsed leases included, so this
        # process's watcher need not look at notifications meanwhile (the other processes' watchers do).
        backlog=functools.partial(workers.pause_watch, queue.JOB_KEY, float(weave_settings.WAKE_POLL_MAX)),
    )
    return run_drain(enqueue_more=False, linger=lingering)


class _SlotKeeper:
    """The drain's hold on its request slot, renewed every half linger while it has room for new rows."""

    def __init__(self, name: str, linger: float) -> None:
        self.name, self.linger = name, linger
        self.renewed = time.monotonic()

    def renew(self, has_space: bool) -> None:
        """Hold the slot on while the drain can take new rows (the lingering is this task's, WAKE_LINGER).

        Held, the slot makes a new row's request a note to this drain (an arrival) instead of a task.
        A drain with every slot busy lets it lapse, so the next row asks for a helper on another worker.
        """
        if has_space and self.linger and time.monotonic() - self.renewed >= self.linger / 2:
            workers.keep_slot_taken(self.name, _slot_time(self.linger))
            self.renewed = time.monotonic()


def _arrivals_heard() -> bool:
    """Whether this process's watcher listens (so each covered request reaches the drain as an arrival)."""
    return bool(weave_settings.WAKE_WATCHER) and workers.listen_state().mode == "listen"


def warm_up(**_signal: Any) -> None:
    """Import what a drain needs, once per worker process (a django-q2 `post_spawn` receiver).

    The first drain of a freshly spawned or recycled worker would otherwise import the delivery modules and
    every configured backend's module (tens of milliseconds on a loaded host), load the backends' keys and
    wait for an access token, all while its rows wait. No backend is built or connected here: backends
    belong to the drain's own event loop.
    """
    # Imports each configured backend class, and readies its credentials (a token fetch runs in the
    # background); a problem is the drain's (and the checks') to report.
    prepare_backends()
    # What these imports made lives as long as the process: out of the collector's way too. No collection
    # here: the process's start (`weave.heap.settle_after_spawn`) makes the one collection.
    workers.settle_heap(collect=False)


def sweep() -> dict[str, Any]:
    """Pick up expired leases and due retries even when nothing new arrives (scheduled every minute).

    A safety net: the watchers normally wake a drain at each due time within a second.
    """
    return drain()


def _slot_time(linger: float) -> float:
    # Long enough to span one renewal period; short enough that a killed drain's slot lapses quickly.
    return linger + float(weave_settings.WAKE_GRACE)

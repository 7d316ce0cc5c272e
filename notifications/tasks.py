"""Thin django-q2 entry points for the notifications app: the work lives in `delivery`."""

import time
from typing import Any

from notifications import queue
from notifications.delivery import drain as run_drain
from notifications.delivery.worker import DeliveryReport
from notifications.models import Notification
from weave import jobs, wake
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
        wake.task_started(name)
    else:
        wake.hold(name, _hold_for(linger))
    # Wake the watchers: they learn that rows are about to be leased, and so when those leases lapse
    # if this worker dies.
    wake.announce()
    if backlog:
        queue.enqueue_drain()
    try:
        return _drain_and_linger(name, linger).as_dict()
    finally:
        # Stop covering new rows, then look once more: a row committed before this look is seen here,
        # one committed after it finds the slot free and asks for its own drain.
        wake.release(name)
        if Notification.objects.claimable().exists():
            queue.enqueue_drain()
        # Due times changed (retries, released rows): the watchers sleep until the new earliest one.
        jobs.settled()


def _drain_and_linger(name: str, linger: float) -> DeliveryReport:
    budget = float(weave_settings.PUSH_BUDGET)
    started = time.monotonic()
    slot = _Hold(name, linger)
    # The lingering is this task's (WAKE_LINGER), not the worker's: only here is the request slot renewed
    # while it waits, so new rows ask for no other task meanwhile.
    report = run_drain(enqueue_more=False)
    while linger and not report.breaker and not report.budget_spent:
        left = budget - (time.monotonic() - started)
        if left <= 0 or not _wait_for_rows(slot, until=started + budget):
            break
        slot.renew_if_due()
        wake.announce()
        report.add(run_drain(enqueue_more=False, budget=left))
    return report


class _Hold:
    """The drain's hold on its request slot, renewed every half linger while it looks for rows."""

    def __init__(self, name: str, linger: float) -> None:
        self.name, self.linger = name, linger
        self.renewed = time.monotonic()

    def renew_if_due(self) -> None:
        if time.monotonic() - self.renewed >= self.linger / 2:
            wake.hold(self.name, _hold_for(self.linger))
            self.renewed = time.monotonic()


def _wait_for_rows(slot: _Hold, *, until: float) -> bool:
    """Look for claimable rows for up to the linger, renewing the hold: at once when this process's watcher
    hears that a row was requested (`wake.arrivals`), else every WAKE_GRACE / 2."""
    step = max(0.02, float(weave_settings.WAKE_GRACE) / 2)
    deadline = min(time.monotonic() + slot.linger, until)
    while time.monotonic() < deadline:
        wake.arrivals.clear()  # cleared before the look: a request after it sets it again, none is lost
        if Notification.objects.claimable().exists():
            return True
        slot.renew_if_due()
        wake.wait_for_arrival(min(step, max(0.0, deadline - time.monotonic())))
    return False


def sweep() -> dict[str, Any]:
    """Pick up expired leases and due retries even when nothing new arrives (scheduled every minute).

    A safety net: the watchers normally wake a drain at each due time within a second.
    """
    return drain()


def _hold_for(linger: float) -> float:
    # Long enough to span one renewal period; short enough that a killed drain's slot lapses quickly.
    return linger + float(weave_settings.WAKE_GRACE)

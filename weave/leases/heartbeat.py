"""`Heartbeat`: keep a lease alive around slow work (DESIGN §2.4).

It renews before the work starts, every `interval` while it runs (`WEAVE['HEARTBEAT_INTERVAL']`
when set, else ttl/3), and once more on demand right before the save. A failed renewal is
remembered and wins: `check()` and `before_save()` raise it even if the work itself returned
normally. Once the attempt's budget is spent it stops renewing, so a hung step cannot hold a lease
forever.

Renewals during the work run on a background thread with its own database connection (Django
connections are per thread), closed when the thread ends. Timing comes from the clock, so a
`FakeClock` drives it without sleeping: tests call `tick()` after advancing the clock.
"""

import logging
import threading
from datetime import timedelta
from typing import Protocol

from django.db import DatabaseError, connections, models

from weave.conf import weave_settings
from weave.leases.clock import Clock, default_clock
from weave.leases.errors import LeaseLost
from weave.leases.lease import Lease

logger = logging.getLogger("weave.leases")


class Renews(Protocol):
    """What a heartbeat renews through: a leased model's manager or `LeaseQuerySet`."""

    @property
    def model(self) -> type[models.Model]: ...

    def renew(self, lease: Lease, *, ttl: float | timedelta, clock: Clock = ...) -> None: ...


def heartbeat_interval(ttl: float) -> float:
    """Return the seconds between renewals for a lease of `ttl`: HEARTBEAT_INTERVAL when set, else ttl/3.

    Never longer than ttl/3: weave.E010 refuses configured TTLs below three intervals, and a TTL passed
    in by hand gets the same margin (one late renewal must not lose the lease).
    """
    configured = weave_settings.HEARTBEAT_INTERVAL
    return ttl / 3 if configured is None else min(configured, ttl / 3)


class Heartbeat:
    """Renew `lease` on `queryset` while a block of slow work runs."""

    def __init__(
        self,
        queryset: Renews,
        lease: Lease,
        *,
        ttl: float,
        clock: Clock = default_clock,
        budget: float | None = None,
        interval: float | None = None,
        background: bool = True,
    ) -> None:
        self.queryset = queryset
        self.lease = lease
        self.ttl = ttl
        self.clock = clock
        self.interval = interval if interval is not None else heartbeat_interval(ttl)
        self.background = background
        self._budget_ends = None if budget is None else clock.monotonic() + budget
        self._next_due = clock.monotonic()
        self._failure: LeaseLost | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals: list[float] = []  # clock.monotonic() of every renewal that landed

    # --- context manager: renew before, keep renewing during, stop after ------------------------

    def __enter__(self) -> "Heartbeat":
        self.beat()
        self.check()
        if self.background:
            self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.lease.pk}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # --- what callers use -------------------------------------------------------------------------

    @property
    def budget_spent(self) -> bool:
        return self._budget_ends is not None and self.clock.monotonic() >= self._budget_ends

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def check(self) -> None:
        """Raise the first failed renewal, if any. A lost lease stays lost."""
        if self._failure is not None:
            raise self._failure

    def before_save(self) -> None:
        """Renew once more right before a save, then raise if any renewal has failed."""
        self.check()
        self.beat()
        self.check()

    def tick(self) -> bool:
        """Renew if a renewal is due on the clock; return whether one was attempted."""
        if self.clock.monotonic() < self._next_due:
            return False
        self.beat()
        return True

    def beat(self) -> None:
        """Renew now unless the budget is spent or a renewal already failed. Failures are kept, not raised."""
        with self._lock:
            if self._failure is not None or self.budget_spent:
                return
            now = self.clock.monotonic()
            try:
                self.queryset.renew(self.lease, ttl=timedelta(seconds=self.ttl), clock=self.clock)
            except DatabaseError as error:
                # The database could not be reached (a partition, a server-side timeout): we cannot know
                # whether the lease still stands, so the failure wins like a refusal would (DESIGN §2.4).
                first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                lost = LeaseLost(f"Renewal failed: the database could not be reached ({first}).")
                lost.__cause__ = error
                self._failure = lost
                logger.warning(
                    "event=renewal_failed model=%s id=%s owner=%s fence=%s reason=%r",
                    self.queryset.model._meta.label,
                    self.lease.pk,
                    self.lease.owner,
                    self.lease.fence,
                    str(lost),
                )
                return
            except LeaseLost as lost:
                self._failure = lost
                logger.warning(
                    "event=renewal_failed model=%s id=%s owner=%s fence=%s reason=%r",
                    self.queryset.model._meta.label,
                    self.lease.pk,
                    self.lease.owner,
                    self.lease.fence,
                    str(lost),
                )
                return
            self.renewals.append(now)
            self._next_due = now + self.interval

    # --- the background thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self.failed and not self.budget_spent:
                wait = self._next_due - self.clock.monotonic()
                if self.clock.wait(self._stop, wait):
                    break
                self.tick()
        finally:
            # This thread's own connection: close it, or PostgreSQL keeps it until the process ends.
            connections.close_all()

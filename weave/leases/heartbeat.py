"""`Heartbeat`: keep a lease alive around slow work (DESIGN §2.4).

It renews before the work starts, every `interval` while it runs (`WEAVE['HEARTBEAT_INTERVAL']`
when set, else ttl/3), and once more on demand right before the save. A failed renewal is
remembered and wins: `check()` and `before_save()` raise it even if the work itself returned
normally. Once the attempt's budget is spent it stops renewing, so a hung step cannot hold a lease
forever.

Only a guard refusal (`LeaseLost`) means the lease is gone. A renewal that fails with a database
error (a dropped connection, a failover) is logged and retried at once on a fresh connection, then
again soon after; the lease still stands until its expiry. If no renewal lands before the expiry
(judged conservatively: the last landed renewal's start plus the ttl), the lease is treated as
lapsed (`LeaseLapsed`): the attempt stops before its save and the reason names the last error.

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
from weave.leases.errors import LeaseLapsed, LeaseLost
from weave.leases.lease import Lease
from weave.sanitize import outside_text
from weave.wording import how_many

logger = logging.getLogger("weave.leases")

# Immediate retries of one renewal on a fresh connection after a database error.
_RETRIES = 2


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
        # When the lease surely still stands: our last landed renewal's start + ttl (the claim counts
        # as one, made just before this heartbeat). The database's own expiry is at least this late.
        self._live_until = clock.monotonic() + ttl
        self.errors: list[str] = []  # database errors met while renewing, oldest first
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
        """Raise the first failed renewal, if any, or `LeaseLapsed` once no renewal landed before the expiry."""
        with self._lock:
            if self._failure is None and self.errors and self.clock.monotonic() >= self._live_until:
                errors = how_many(len(self.errors), "database error{}")
                self._failure = LeaseLapsed(
                    f"No renewal landed before the lease expired ({errors} while renewing; last: {self.errors[-1]})."
                    " Stopped before saving."
                )
                self._log("renewal_failed", str(self._failure))
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
            for retry in range(_RETRIES + 1):
                try:
                    self.queryset.renew(self.lease, ttl=timedelta(seconds=self.ttl), clock=self.clock)
                except LeaseLost as lost:
                    self._failure = lost
                    self._log("renewal_failed", str(lost))
                    return
                except DatabaseError as exc:
                    # Not a refusal: the database could not answer. The lease still stands until it expires.
                    error = outside_text(f"{type(exc).__name__}: {exc}")
                    self.errors.append(error)
                    fresh = self._fresh_connection()
                    self._log("renewal_retry", f"try {retry + 1}: {error}" + ("; reconnecting" if fresh else ""))
                    if not fresh:
                        break  # inside a transaction: a reconnect would lose it; try again at the next beat
                    continue
                self.renewals.append(now)
                self._live_until = now + self.ttl
                self._next_due = now + self.interval
                return
            # Every try failed: try again soon, well before the lease runs out.
            self._next_due = now + min(self.interval, self.ttl) / 3

    def _fresh_connection(self) -> bool:
        """Drop this thread's connection so the next query opens a new one; False inside a transaction."""
        alias = getattr(self.queryset, "db", None) or "default"
        connection = connections[alias]
        if connection.in_atomic_block:
            return False
        connection.close()
        return True

    def _log(self, event: str, reason: str) -> None:
        logger.warning(
            "event=%s model=%s id=%s owner=%s fence=%s reason=%s",
            event,
            self.queryset.model._meta.label,
            self.lease.pk,
            self.lease.owner,
            self.lease.fence,
            _quoted(reason),
        )

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


def _quoted(text: str) -> str:
    return '"' + outside_text(text, limit=1000).replace("\\", "\\\\").replace('"', '\\"') + '"'

"""`BatchHeartbeat`: keep every row of a claimed batch alive while a worker works through it (DESIGN §2.4).

A batch is claimed in one statement and worked row by row; the rows waiting their turn, the row
running and the rows finished but not yet written all stay under the batch's lease. One
`renew_batch` statement per lease length renews them every interval (ttl/3, or
`WEAVE['HEARTBEAT_INTERVAL']` when shorter). A row the renewal finds lost leaves the batch: the
worker must not start it, and its finish is refused anyway by its own guard.

The running row may have a budget (a task's timeout): once spent, that row alone is no longer
renewed, so a hung row loses its lease while the rest of the batch keeps theirs. It may also have a
lease length of its own, set by renewing it before it starts.

Renewals run on a background thread with its own database connection and never hold the lock
while a statement runs: the worker's thread may hold row locks in a transaction (a finish in
flight) that the renewal waits for. On a `FakeClock` nothing runs in the background; tests call
`tick()` after moving the clock.
"""

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connections

from weave.leases.clock import Clock, default_clock
from weave.leases.heartbeat import heartbeat_interval
from weave.leases.lease import BatchLease, Lease
from weave.sanitize import outside_text

logger = logging.getLogger("weave.leases")


class BatchHeartbeat:
    """Renew the rows of a batch (under one owner, each at its own fence) while the batch is worked."""

    def __init__(
        self,
        queryset: Any,
        *,
        owner: str,
        ttl: float,
        clock: Clock = default_clock,
        background: bool = True,
        poll: float | None = None,
        while_running: Callable[[float], None] | None = None,
    ) -> None:
        self.queryset = queryset
        self.owner = owner
        self.ttl = ttl
        self.clock = clock
        self.background = background
        # How often the thread looks at the running row (for `while_running`), between renewals.
        self.poll = poll
        self.while_running = while_running
        self._renewing: dict[Any, tuple[int, float]] = {}  # pk -> (fence, ttl)
        self._shortest = ttl  # the shortest lease any row was given (a task's own `lease_ttl` may be shorter)
        self.lost: set[Any] = set()  # rows a renewal found lost before they were finished
        self._running: Any = None
        self._running_since = 0.0
        self._running_ends: float | None = None
        self._next_due = clock.monotonic() + heartbeat_interval(ttl)
        self._live_until = clock.monotonic() + ttl  # our last landed renewal's start + the shortest ttl
        self._lock = threading.Lock()
        self._beating = threading.Lock()  # one renewal at a time (the thread, or the worker before a start)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals: list[float] = []
        self.errors: list[str] = []

    # --- the rows --------------------------------------------------------------------------------

    def add(self, batch: BatchLease) -> None:
        """Keep the rows just claimed as `batch` (their claim was their first renewal)."""
        now = self.clock.monotonic()
        with self._lock:
            # Rows still held keep the batch's earlier deadline; a batch that held none starts afresh.
            self._live_until = min(self._live_until, now + self.ttl) if self._renewing else now + self.ttl
            for pk, fence in batch.fences.items():
                self._renewing[pk] = (fence, self.ttl)

    def keep(self, leases: Iterable[Lease]) -> None:
        """Renew `leases` again (a write of them failed and will be tried again)."""
        with self._lock:
            for lease in leases:
                self._renewing.setdefault(lease.pk, (lease.fence, self.ttl))

    def renews(self, pk: Any) -> bool:
        """Whether `pk` is still among the leases this heartbeat renews."""
        with self._lock:
            return pk in self._renewing

    def forget(self, pks: Iterable[Any]) -> None:
        """Stop renewing `pks` (their finish is being written, or they were given up)."""
        with self._lock:
            for pk in pks:
                self._renewing.pop(pk, None)

    def start(self, lease: Lease, *, ttl: float | None = None, budget: float | None = None) -> None:
        """Row `lease.pk` is running now: renewed up to `budget` seconds, under `ttl` (renewed now) if given.

        Renewing before the start, when the batch's lease may have run out unseen or the row has a
        lease length of its own, raises `LeaseLost` when the row is no longer ours.
        """
        self.ensure_live()
        with self._lock:
            self._running = lease.pk
            self._running_since = self.clock.monotonic()
            self._running_ends = None if budget is None else self._running_since + budget
        if ttl is not None and ttl != self.ttl:
            self.queryset.renew(lease, ttl=timedelta(seconds=ttl), clock=self.clock)
            with self._lock:
                if lease.pk in self._renewing:
                    self._renewing[lease.pk] = (lease.fence, ttl)
                    self._shortest = min(self._shortest, ttl)
            # Renewed just now, under its own lease: the next renewal is due within a third of it.
            self._next_due = min(self._next_due, self.clock.monotonic() + self._interval())

    def stop_running(self) -> None:
        with self._lock:
            self._running = None
            self._running_ends = None

    @property
    def running_budget_spent(self) -> bool:
        return self._running_ends is not None and self.clock.monotonic() >= self._running_ends

    # --- renewals --------------------------------------------------------------------------------

    def ensure_live(self) -> None:
        """Renew at once when the batch's lease may have run out since the last renewal (a stall)."""
        margin = min(self._interval(), self._shortest) / 3
        if self.clock.monotonic() >= self._live_until - margin:
            self.beat()

    def tick(self) -> bool:
        """Renew if a renewal is due on the clock; return whether one was attempted."""
        if self.clock.monotonic() < self._next_due:
            return False
        self.beat()
        return True

    def beat(self) -> None:
        """Renew every row still ours (the running row only within its budget); drop the rows found lost."""
        with self._beating:
            now = self.clock.monotonic()
            groups = self._groups()
            try:
                for ttl, fences in groups.items():
                    lost = self.queryset.renew_batch(BatchLease(self.owner, dict(fences)), ttl=ttl, clock=self.clock)
                    self._drop_lost(lost, fences)
            except DatabaseError as exc:
                # Not a refusal: the database could not answer. The leases stand until they expire.
                self.errors.append(outside_text(f"{type(exc).__name__}: {exc}"))
                logger.warning("event=batch_renewal_retry owner=%s reason=%s", self.owner, self.errors[-1])
                if not connections[self.queryset.db].in_atomic_block:
                    connections[self.queryset.db].close()
                self._next_due = now + self._interval() / 3
                return
            self.renewals.append(now)
            shortest = min(groups, default=self.ttl)
            self._live_until = now + shortest
            self._next_due = now + self._interval()

    def _groups(self) -> dict[float, dict[Any, int]]:
        with self._lock:
            skip = self._running if self.running_budget_spent else None
            groups: dict[float, dict[Any, int]] = {}
            for pk, (fence, ttl) in self._renewing.items():
                if pk != skip:
                    groups.setdefault(ttl, {})[pk] = fence
            return groups

    def _drop_lost(self, lost: list[Any], fences: dict[Any, int]) -> None:
        if not lost:
            return
        with self._lock:
            for pk in lost:
                if self._renewing.get(pk, (None,))[0] == fences[pk]:
                    del self._renewing[pk]
                    self.lost.add(pk)
        logger.warning("event=batch_rows_lost owner=%s rows=%s", self.owner, len(lost))

    def _interval(self) -> float:
        return heartbeat_interval(self._shortest)

    # --- the background thread -------------------------------------------------------------------

    def __enter__(self) -> "BatchHeartbeat":
        if self.background:
            self._thread = threading.Thread(target=self._run, name=f"batch-heartbeat-{self.owner}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                wait = self._next_due - self.clock.monotonic()
                if self.poll is not None:
                    wait = min(wait, self.poll)
                if self.clock.wait(self._stop, max(0.0, wait)):
                    break
                self.tick()
                self._look_at_running()
        finally:
            connections.close_all()  # this thread's own connection

    def _look_at_running(self) -> None:
        with self._lock:
            since = self._running_since if self._running is not None else None
        if since is not None and self.while_running is not None:
            self.while_running(self.clock.monotonic() - since)

"""The claimed rows a worker carries from its claim buffer through the sender to its completer."""

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router

from notifications.backends import PushMessage
from weave.events import log_event
from weave.leases import BatchLease, Lease
from weave.workers import is_cut_off

logger = logging.getLogger("weave.notifications")
JOB = "notification"


def reconnect_if_cut(error: BaseException) -> bool:
    """Whether `error` means this thread's link to the database was cut; if so, drop its connection.

    Django keeps a connection whose link failed outside a COMMIT (a statement in autocommit, an
    on-commit hook after the COMMIT landed), and every later statement on it fails with "the
    connection is closed". Dropped, the next statement opens a fresh one: what a worker reads back
    after a cut is read there. Inside a transaction the connection stays: its owner ends it.
    """
    if not is_cut_off(error):
        return False
    from notifications.models import Notification

    connection = connections[router.db_for_write(Notification)]
    if not connection.in_atomic_block:
        connection.close()
    return True


# The columns a claim returns for each row: no SELECT after the claim.
ROW_FIELDS = (
    "device_token",
    "title",
    "body",
    "data",
    "options",
    "idempotency_key",
    "attempts",
    "backend",
    "next_attempt_at",
    "collapse_key",
    "priority",
    "expires_at",
    "device",
)


@dataclass(eq=False)  # a claim is itself: `in` and `remove` must not compare its fields
class Claim:
    """One claim statement's rows: one lease (owner, a fence per row), one expiry to keep alive."""

    batch: BatchLease
    deadline: float  # local estimate of the lease's expiry (clock.monotonic scale)
    database_at: datetime | None  # the database's time at the claim ...
    local_at: float  # ... and ours at the same moment, to date sends without a query
    open: int = 0  # rows not yet finished, released or skipped
    counts: Counter[str] = field(default_factory=Counter)
    inactive: dict[Any, str] = field(default_factory=dict)  # the claim's devices found inactive: id -> reason
    # The quiet-hours policy and the users of the claim's devices (device id -> user), read at the claim
    # only when WEAVE PUSH_QUIET_HOURS names a policy: without one, no query and no call.
    quiet: Any = None
    users: dict[Any, Any] = field(default_factory=dict)

    def database_time(self, local_now: float) -> datetime:
        """The database's time now, estimated from the claim's instant (no query)."""
        if self.database_at is None:
            raise RuntimeError("a row was dated from an empty claim")
        return self.database_at + timedelta(seconds=local_now - self.local_at)

    def settle(self, what: str) -> None:
        """Count one row as done; when the claim's last row is done, log one line for all of it."""
        self.counts[what] += 1
        self.open -= 1
        if self.open:
            return
        counts = self.counts
        log_event(
            logger,
            "batch",
            job=JOB,
            id="-",
            owner=self.batch.owner,
            rows=sum(counts.values()),
            delivered=counts["delivered"],
            retried=counts["retry"] + counts["unknown"],
            failed=counts["failed"],
            lease_lost=counts["lease_lost"],
            skipped=counts["skipped"],
            released=counts["released"],
            expired=counts["expired"],
        )


@dataclass
class Row:
    """One claimed notification on its way: its lease, its message and when it went out."""

    pk: Any
    claim: Claim
    fence: int
    attempts: int  # the row's attempts when claimed; only our lease can change it meanwhile
    message: PushMessage
    sent_at: datetime | None = None  # the database's time when it was handed to the sender
    device_id: Any = None
    scope: str = ""  # its circuit breaker's scope, once the worker asked (backend alias, maybe origin)
    probe: bool = False  # sent as its scope's half-open probe
    ticket: int | None = None  # its start-order number at its scope's breaker, when it went as "go"

    @property
    def owner(self) -> str:
        return self.claim.batch.owner

    @property
    def lease(self) -> Lease:
        return Lease(pk=self.pk, owner=self.owner, fence=self.fence)


def message_from(values: Mapping[str, Any]) -> PushMessage:
    """The message a claimed row's values describe."""
    return PushMessage(
        idempotency_key=str(values["idempotency_key"]),
        token=values["device_token"],
        title=values["title"],
        body=values["body"],
        data=values["data"] or {},
        options=values.get("options") or {},
        collapse_key=values.get("collapse_key") or "",
        priority=values.get("priority") or "normal",
        expires_at=values.get("expires_at"),
        backend=values.get("backend") or "default",
    )


def log_lost(row_pk: Any, owner: str, reason: str, fence: int | None = None) -> None:
    """The one line every lost lease gets, wherever the loss was found."""
    log_event(logger, "lease_lost", job=JOB, id=row_pk, owner=owner, fence=fence, reason=reason)

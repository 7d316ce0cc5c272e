"""Write a group's attempt receipts with ONE multi-row INSERT, through the lease core's receipt writer.

`bulk_create` builds a model instance per row and compiles every value through the ORM; for a group
of receipts that is more work than the statement is for the database. `weave.leases.insert_receipts` writes
plain rows, with the clock's "now" as an expression the database evaluates.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notifications.models import DeliveryAttempt
from weave import leases
from weave.leases import Clock


@dataclass(frozen=True)
class Receipt:
    """One attempt's receipt; `retry_at` is the due time its finish gave the row, and `finished_at` the finish's
    reading of the clock for it (else None: the database's now when the receipt is written)."""

    notification_id: Any
    owner: str
    fence: int
    started_at: datetime | None
    http_status: int | None
    latency_ms: int | None
    outcome: str
    reason: str
    number: int | None = None
    retry_at: datetime | None = None
    finished_at: datetime | None = None
    backend: str = ""


def insert_receipts(receipts: list[Receipt], *, clock: Clock) -> None:
    """Insert `receipts` in one statement (several only past the database's parameter limit)."""
    leases.insert_receipts(DeliveryAttempt, [_row(r, clock) for r in receipts])


def _row(r: Receipt, clock: Clock) -> dict[str, Any]:
    # Both times by the database clock, never this host's: the due time the one the row's finish stored
    # (read back from it), the end that finish's own reading or an expression compiled into the statement.
    return {
        "notification": r.notification_id,
        "owner": r.owner,
        "fence": r.fence,
        "started_at": r.started_at,
        "finished_at": clock.now() if r.finished_at is None else r.finished_at,
        "http_status": r.http_status,
        "latency_ms": r.latency_ms,
        "outcome": r.outcome,
        "reason": r.reason,
        "number": r.number,
        "retry_at": r.retry_at,
        "backend": r.backend,
    }

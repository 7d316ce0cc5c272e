"""What retention may delete of the push history (registered with `weave.retention` at startup).

- finished notifications (delivered, failed, cancelled, expired) created before the cutoff, with their
  attempts; a pending row is never purged, however old;
- attempts finished before the cutoff, of any notification;
- breaker openings before the cutoff.

Attempts are counted by outcome as they go, so `weave_delivery_attempts_total` never goes down.
"""

from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet

from notifications.models import BreakerOpening, DeliveryAttempt, Notification
from weave.operations import PurgeSpec, register_purge

FINISHED = ("delivered", "failed", "cancelled", "expired")


def old_notifications(cutoff: datetime) -> "QuerySet[Notification]":
    # Primary keys grow with created_at: bound the scan by the first row created after the cutoff, so
    # a table with nothing to purge answers from the primary key index instead of a full scan.
    first_kept = Notification.objects.filter(created_at__gte=cutoff).order_by("pk").values_list("pk", flat=True)[:1]
    rows = Notification.objects.filter(status__in=FINISHED, created_at__lt=cutoff)
    boundary = list(first_kept)
    return rows.filter(pk__lt=boundary[0]) if boundary else rows


def by_outcome(attempts: "QuerySet[DeliveryAttempt]") -> dict[str, int]:
    return dict(attempts.order_by().values_list("outcome").annotate(n=Count("pk")))


def _attempts_first(notifications: "QuerySet[Any]") -> dict[str, dict[str, int]]:
    attempts = DeliveryAttempt.objects.filter(notification__in=notifications.values("pk"))
    counts = by_outcome(attempts)
    attempts._raw_delete(attempts.db)  # nothing refers to an attempt
    return {"attempts": counts}


def register() -> None:
    register_purge(
        PurgeSpec(
            kind="attempts",
            model=DeliveryAttempt,
            order=10,
            labels=by_outcome,
            candidates=lambda c: DeliveryAttempt.objects.filter(finished_at__lt=c),
        )
    )
    register_purge(
        PurgeSpec(
            kind="notifications", model=Notification, order=20, candidates=old_notifications, before=_attempts_first
        )
    )
    register_purge(
        PurgeSpec(
            kind="breaker_openings",
            model=BreakerOpening,
            order=30,
            candidates=lambda c: BreakerOpening.objects.filter(opened_at__lt=c),
        )
    )

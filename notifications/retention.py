"""What retention may delete of the push history (registered with `weave.retention` at startup).

- finished notifications (delivered, failed, cancelled, expired) that finished before the cutoff and
  that no worker holds, with their attempts; a pending row is never purged, however old, and a push
  scheduled far ahead is kept for the whole period after its delivery;
- attempts finished before the cutoff, of notifications that also finished before it (never the
  attempts of a pending row, nor of one that finished since);
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
    # By finish time (`notif_finished_idx`): a row still pending has none.
    return Notification.objects.filter(status__in=FINISHED, owner__isnull=True, finished_at__lt=cutoff)


def old_attempts(cutoff: datetime) -> "QuerySet[DeliveryAttempt]":
    return DeliveryAttempt.objects.filter(
        finished_at__lt=cutoff,
        notification__status__in=FINISHED,
        notification__owner__isnull=True,
        notification__finished_at__lt=cutoff,
    )


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
            candidates=old_attempts,
            lock_of=("self", "notification"),  # the parent's state decides: it is locked and re-checked too
        )
    )
    register_purge(
        PurgeSpec(
            kind="notifications",
            model=Notification,
            order=20,
            candidates=old_notifications,
            before=_attempts_first,
            ordering=("finished_at",),
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

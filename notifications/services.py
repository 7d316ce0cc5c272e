"""Public API of the notifications app."""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from notifications import queue
from notifications.models import ContentLocked, Notification
from notifications.validation import TITLE_MAX as NOTIFICATION_TITLE_MAX
from notifications.validation import check_message
from weave.events import log_event
from weave.leases import Clock, DbNow, default_clock
from weave.validation import check_ids, check_text

logger = logging.getLogger("weave.notifications")

__all__ = [
    "NOTIFICATION_TITLE_MAX",
    "BulkResult",
    "notification_cancel",
    "notification_check",
    "notification_create",
    "notification_edit",
    "ContentLocked",
    "notification_retry_now",
]


def notification_create(
    *, device_token: str, title: str, body: str = "", data: dict[str, Any] | None = None
) -> Notification:
    """Create a notification and enqueue its delivery once the transaction commits.

    Every argument is checked first (`notifications.validation.check_message`): a bad one raises a
    `ValidationError` naming its field, nothing is stored and the caller's transaction stays usable.
    """
    message = check_message(device_token=device_token, title=title, body=body, data=data)
    notification = Notification.objects.create(
        device_token=message.device_token,
        title=message.title,
        body=message.body,
        data=message.data,
        next_attempt_at=DbNow(),
    )
    notification.refresh_from_db(fields=["next_attempt_at"])
    transaction.on_commit(_enqueue_drain)
    return notification


def notification_edit(
    *, notification_id: int, device_token: str, title: str, body: str = "", data: dict[str, Any] | None = None
) -> int:
    """Change a notification's content while no worker has ever claimed it; return the id.

    One conditional UPDATE (pending, fence 0, no owner): a claim that lands first makes it match no
    row, and `ContentLocked` is raised; the record of what was sent never changes afterwards.
    """
    (notification_id,) = check_ids([notification_id], field="notification_id")
    message = check_message(device_token=device_token, title=title, body=body, data=data)
    changed = Notification.objects.filter(
        pk=notification_id, status=Notification.Status.PENDING, fence=0, owner__isnull=True
    ).update(device_token=message.device_token, title=message.title, body=message.body, data=message.data)
    if changed != 1:
        raise ContentLocked(
            f"Notification {notification_id} was already claimed by a worker (or is gone): its content "
            "is the record of what was sent and cannot change."
        )
    log_event(logger, "edited", job="notification", id=notification_id)
    return notification_id


def notification_check(*, device_token: str, title: str, body: str = "", data: dict[str, Any] | None = None) -> None:
    """Raise the `ValidationError` `notification_create` would raise for these arguments; store nothing.

    For callers that must know before their first side effect that a notification they will create
    later is acceptable (onboarding checks its welcome message before any external call).
    """
    check_message(device_token=device_token, title=title, body=body, data=data)


def _enqueue_drain() -> None:
    queue.enqueue_drain()


@dataclass
class BulkResult:
    """Which notifications an admin action changed, and which it left alone and why."""

    changed: list[int] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)  # held by a worker under a live lease
    skipped: list[int] = field(default_factory=list)  # not in a state the action applies to


def notification_retry_now(
    *, notification_ids: Iterable[int], requested_by: str = "", clock: Clock = default_clock
) -> BulkResult:
    """Make pending or failed notifications due now. Rows a worker holds under a live lease are left alone.

    A failed row starts over with a fresh attempt count; its attempt history is kept.
    """
    ids = check_ids(notification_ids, field="notification_ids")
    requested_by = check_text(requested_by, field="requested_by", max_chars=150, one_line=True)
    who = f" by {requested_by}" if requested_by else ""
    with transaction.atomic():
        pending = _lock_free(ids, Notification.Status.PENDING, clock)
        failed = _lock_free(ids, Notification.Status.FAILED, clock)
        Notification.objects.filter(pk__in=pending).update(next_attempt_at=clock.now())
        Notification.objects.filter(pk__in=failed).update(
            status=Notification.Status.PENDING,
            attempts=0,
            next_attempt_at=clock.now(),
            last_error=f"Retry requested{who}; starting over with a fresh attempt count.",
        )
        if pending or failed:
            transaction.on_commit(_enqueue_drain)
    for pk in [*pending, *failed]:
        log_event(logger, "retry_requested", job="notification", id=pk, reason=f"retry now requested{who}")
    return _sort(ids, set(pending) | set(failed), clock)


def notification_cancel(
    *, notification_ids: Iterable[int], requested_by: str = "", clock: Clock = default_clock
) -> BulkResult:
    """Cancel pending notifications that no worker holds; report busy and finished ones instead of forcing them."""
    ids = check_ids(notification_ids, field="notification_ids")
    requested_by = check_text(requested_by, field="requested_by", max_chars=150, one_line=True)
    who = f" by {requested_by}" if requested_by else ""
    with transaction.atomic():
        pending = _lock_free(ids, Notification.Status.PENDING, clock)
        Notification.objects.filter(pk__in=pending).update(
            status=Notification.Status.CANCELLED, last_error=f"Cancelled{who}."
        )
    for pk in pending:
        log_event(logger, "cancelled", job="notification", id=pk, reason=f"cancelled{who}")
    return _sort(ids, set(pending), clock)


def _lock_free(ids: list[int], status: str, clock: Clock) -> list[int]:
    """Lock the rows of `ids` in `status` that nobody holds under a live lease.

    The row locks keep a claim off until commit (a batch claim skips locked rows), so the update
    that follows cannot race a worker; a worker whose lease merely expired is refused by its own guard.
    """
    free = Notification.objects.filter(pk__in=ids, status=status).free_or_expired(clock)
    return list(free.select_for_update(skip_locked=True).values_list("pk", flat=True))


def _sort(ids: list[int], changed: set[int], clock: Clock) -> BulkResult:
    busy = set(Notification.objects.filter(pk__in=ids).live(clock).values_list("pk", flat=True)) - changed
    return BulkResult(changed=sorted(changed), busy=sorted(busy), skipped=sorted(set(ids) - changed - busy))

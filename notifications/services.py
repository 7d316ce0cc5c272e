"""Public API of the notifications app."""

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction

from notifications import queue
from notifications.models import Notification
from weave.conf import weave_settings
from weave.events import log_event
from weave.leases import Clock, DbNow, default_clock

logger = logging.getLogger("weave.notifications")


def notification_create(
    *, device_token: str, title: str, body: str, data: dict[str, Any] | None = None
) -> Notification:
    """Create a notification and enqueue its delivery once the transaction commits."""
    device_token = (device_token or "").strip()
    if not device_token:
        raise ValidationError({"device_token": "A device token is required."})
    if len(device_token) > (most := _field_length("device_token")):
        raise ValidationError({"device_token": f"A device token has at most {most} characters."})
    if not (title or "").strip():
        raise ValidationError({"title": "A title is required."})
    if len(title) > (most := _field_length("title")):
        raise ValidationError({"title": f"A title has at most {most} characters."})
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValidationError({"data": f"data must be a JSON object, not {type(data).__name__}."})
    try:
        payload = json.dumps({"to": device_token, "title": title, "body": body, "data": data})
    except (TypeError, ValueError) as exc:
        raise ValidationError({"data": f"data is not JSON-serialisable: {exc}"}) from exc
    limit = weave_settings.PUSH_MAX_PAYLOAD_BYTES
    size = len(payload.encode())
    if size > limit:
        raise ValidationError(
            f"Payload is {size} bytes; the provider limit is {limit} bytes (WEAVE PUSH_MAX_PAYLOAD_BYTES)."
        )

    notification = Notification.objects.create(
        device_token=device_token, title=title, body=body, data=data, next_attempt_at=DbNow()
    )
    notification.refresh_from_db(fields=["next_attempt_at"])
    if not _drain_requested_on_commit():
        transaction.on_commit(_enqueue_drain)
    return notification


def _drain_requested_on_commit() -> bool:
    """Whether this transaction already asks for a drain when it commits: a bulk send in one transaction
    then asks once, not once per notification (the request is coalesced anyway; this saves the statements)."""
    from django.db import connection

    if not connection.in_atomic_block:
        return False
    # Django keeps (savepoint ids, callback, robust) per registered callback; read defensively.
    pending = getattr(connection, "run_on_commit", None) or []
    return any(len(entry) > 1 and entry[1] is _enqueue_drain for entry in pending)


def _field_length(name: str) -> int:
    field = Notification._meta.get_field(name)
    assert isinstance(field, models.CharField) and field.max_length is not None  # a bounded text column
    return field.max_length


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
    ids = list(notification_ids)
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
    ids = list(notification_ids)
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

"""What a device's state does to delivery: deactivation (pruning), its queued rows, and rows that must not be sent.

The worker calls `deactivate_device()` inside the transaction of an attempt's guarded finish, after
the guard landed, so a stale worker whose finish is refused can never deactivate a device.
`unsendable()` is pure policy: given a claimed row's expiry and its device's state, it says whether the
row must end without being sent, and why.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from notifications.models import Device, Notification
from notifications.signals import send_device_deactivated_signal, send_notification_signals
from notifications.topic_wishes import unsubscribe_registration
from weave.events import log_event
from weave.leases import Clock, default_clock

logger = logging.getLogger("weave.notifications")


def deactivate_device(*, device_id: Any, reason: str, clock: Clock = default_clock) -> bool:
    """Mark the device inactive with `reason`, at the database's time; return whether this call did it.

    A device that leaves also leaves its FCM topics: each topic it was wished into gets an unsubscribe
    wish and a job, in the caller's transaction. Already inactive: nothing changes (the first reason
    and time stay)."""
    changed = Device.objects.filter(pk=device_id, active=True).update(
        active=False, deactivated_at=clock.now(), deactivation_reason=reason
    )
    if changed:
        log_event(logger, "device_deactivated", job="device", id=device_id, reason=reason)
        send_device_deactivated_signal(device_id, reason)
        leave_topics(device_id=device_id, clock=clock)
    return bool(changed)


def leave_topics(*, device_id: Any, clock: Clock = default_clock) -> list[Any]:
    """Wish the device out of every FCM topic it was wished into; return the keys of the jobs that do it."""
    row = Device.objects.filter(pk=device_id).values_list("backend", "token").first()
    if row is None:
        return []
    return unsubscribe_registration(backend=row[0], registration=row[1], clock=clock)


def fail_queued_for_device(*, device_id: Any, clock: Clock = default_clock) -> list[Any]:
    """End the device's pending rows that nobody holds as `failed`, naming why; return their keys.

    Rows under a live lease are skipped (the worker holding them refuses to send to an inactive device),
    and the row locks keep a claim off until commit, exactly as a cancel does."""
    device = Device.objects.filter(pk=device_id).values("active", "deactivation_reason", "deactivated_at").first()
    if device is None or device["active"]:
        return []
    reason = inactive_reason(device["deactivation_reason"])
    return end_queued_for_device(device_id=device_id, reason=reason, clock=clock, why="device deactivated")


def end_queued_for_device(*, device_id: Any, reason: str, clock: Clock = default_clock, why: str) -> list[Any]:
    """End the device's pending rows that nobody holds as `failed` with `reason`; return their keys.

    Picked with `FOR UPDATE SKIP LOCKED` (a claim in progress keeps its rows), then written by
    `end_unsent()`, whose UPDATE repeats the claimable-only condition: a row a worker claimed in between
    is not touched."""
    free = (
        Notification.objects.filter(device_id=device_id, status=Notification.Status.PENDING)
        .free_or_expired(clock)
        .select_for_update(skip_locked=True)
    )
    pks = list(free.values_list("pk", flat=True))
    if pks and end_unsent(pks, reason=reason, clock=clock) != len(pks):
        pks = list(Notification.objects.filter(pk__in=pks, status=Notification.Status.FAILED, last_error=reason)
                   .values_list("pk", flat=True))  # fmt: skip
    for pk in pks:
        log_event(logger, "failed", job="notification", id=pk, reason=why)
    send_notification_signals((pk, Notification.Status.FAILED, reason) for pk in pks)
    return pks


def end_unsent(pks: list[Any], *, reason: str, clock: Clock = default_clock) -> int:
    """Fail those of `pks` still pending and held by nobody (or by a lapsed lease), with `reason`; return how many.

    One UPDATE whose WHERE is the claim's own condition in reverse: a row under a live lease matches
    nothing, keeps its owner, fence and state, and stays its holder's to finish (the holder's guard
    still decides its writes). A lapsed holder that wakes up later is refused by its own guard."""
    if not pks:
        return 0
    # A row whose holder's lease lapsed (a killed worker) is settled too, its dead lease cleared with it.
    pending = Notification.objects.filter(pk__in=pks, status=Notification.Status.PENDING)
    return pending.settle_free(
        clock=clock, status=Notification.Status.FAILED, last_error=reason, finished_at=clock.now()
    )


def handed_over_reason(*, previous_user: Any, new_user: Any, at: datetime | None) -> str:
    """The reason a queued row ends unsent when its device changes hands."""
    when = f" at {at:%Y-%m-%d %H:%M:%S} UTC" if at is not None else ""
    now = f"user {new_user}" if new_user is not None else "no user (signed out)"
    return (
        f"Not sent: the device was registered again by another user{when}; it was queued for user "
        f"{previous_user}, and the device now belongs to {now}."
    )


def inactive_devices(device_ids: set[Any]) -> dict[Any, str]:
    """Return {device id: deactivation reason} for those of `device_ids` that are inactive (no query for none)."""
    if not device_ids:
        return {}
    rows = Device.objects.filter(pk__in=device_ids, active=False).values_list("pk", "deactivation_reason")
    return {pk: reason or "deactivated" for pk, reason in rows}


def device_users(device_ids: set[Any]) -> dict[Any, Any]:
    """Return {device id: user} for those of `device_ids` that belong to a user (one query; none for no device)."""
    if not device_ids:
        return {}
    devices = Device.objects.filter(pk__in=device_ids, user__isnull=False).select_related("user")
    return {device.pk: device.user for device in devices}


def touch_devices(device_ids: set[Any], *, clock: Clock = default_clock) -> None:
    """Set `last_used_at` of the devices that just got a delivery (one statement; none for no device)."""
    device_ids.discard(None)
    if device_ids:
        Device.objects.filter(pk__in=device_ids).update(last_used_at=clock.now())


def device_for_token(backend: str, token: str) -> Any:
    """The id of the registered device with `token` on `backend`, or None."""
    return Device.objects.filter(backend=backend, token=token).values_list("pk", flat=True).first()


def inactive_reason(why: str) -> str:
    return f"Not sent: the device was deactivated ({why or 'no reason given'})."


@dataclass(frozen=True)
class Unsendable:
    """A claimed row that must end without a send: its final status and the reason."""

    status: str
    reason: str


def unsendable(
    *, expires_at: datetime | None, now: datetime, device_active: bool | None, device_reason: str = ""
) -> Unsendable | None:
    """Return how a claimed row ends without being sent, or None to send it.

    `now` is the database's time (the worker's estimate of it at the send); `device_active` is None for a
    row without a device."""
    if expires_at is not None and expires_at <= now:
        late = (now - expires_at).total_seconds()
        return Unsendable(
            Notification.Status.EXPIRED,
            f"Expired at {expires_at:%Y-%m-%d %H:%M:%S} UTC, {late:.1f} s before it could be sent; never sent.",
        )
    if device_active is False:
        return Unsendable(Notification.Status.FAILED, inactive_reason(device_reason))
    return None


def expired_pending(clock: Clock = default_clock) -> Q:
    """Rows still pending past their expiry (for sweeps and audits)."""
    return Q(status=Notification.Status.PENDING, expires_at__isnull=False, expires_at__lte=clock.now())


__all__ = [
    "Unsendable",
    "deactivate_device",
    "device_for_token",
    "device_users",
    "end_queued_for_device",
    "end_unsent",
    "expired_pending",
    "fail_queued_for_device",
    "handed_over_reason",
    "inactive_devices",
    "leave_topics",
    "touch_devices",
    "unsendable",
]

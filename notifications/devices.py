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
from notifications.signals import announce_device_deactivated, announce_notifications
from weave.events import log_event
from weave.leases import Clock, default_clock

logger = logging.getLogger("weave.notifications")


def deactivate_device(*, device_id: Any, reason: str, clock: Clock = default_clock) -> bool:
    """Mark the device inactive with `reason`, at the database's time; return whether this call did it.

    Already inactive: nothing changes (the first reason and time stay)."""
    changed = Device.objects.filter(pk=device_id, active=True).update(
        active=False, deactivated_at=clock.now(), deactivation_reason=reason
    )
    if changed:
        log_event(logger, "device_deactivated", job="device", id=device_id, reason=reason)
        announce_device_deactivated(device_id, reason)
    return bool(changed)


def fail_queued_for_device(*, device_id: Any, clock: Clock = default_clock) -> list[Any]:
    """End the device's pending rows that nobody holds as `failed`, naming why; return their keys.

    Rows under a live lease are skipped (the worker holding them refuses to send to an inactive device),
    and the row locks keep a claim off until commit, exactly as a cancel does."""
    device = Device.objects.filter(pk=device_id).values("active", "deactivation_reason", "deactivated_at").first()
    if device is None or device["active"]:
        return []
    free = (
        Notification.objects.filter(device_id=device_id, status=Notification.Status.PENDING)
        .free_or_expired(clock)
        .select_for_update(skip_locked=True)
    )
    pks = list(free.values_list("pk", flat=True))
    if pks:
        Notification.objects.filter(pk__in=pks).update(
            status=Notification.Status.FAILED, last_error=(why := inactive_reason(device["deactivation_reason"]))
        )
        for pk in pks:
            log_event(logger, "failed", job="notification", id=pk, reason="device deactivated")
        announce_notifications((pk, Notification.Status.FAILED, why) for pk in pks)
    return pks


def inactive_devices(device_ids: set[Any]) -> dict[Any, str]:
    """Return {device id: deactivation reason} for those of `device_ids` that are inactive (no query for none)."""
    if not device_ids:
        return {}
    rows = Device.objects.filter(pk__in=device_ids, active=False).values_list("pk", "deactivation_reason")
    return {pk: reason or "deactivated" for pk, reason in rows}


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
    "expired_pending",
    "fail_queued_for_device",
    "inactive_devices",
    "touch_devices",
    "unsendable",
]

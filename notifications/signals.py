"""Signals a site can react to: a notification delivered, failed or expired, a device deactivated.

    from notifications.signals import notification_failed

    @receiver(notification_failed)
    def tell_support(sender, notification, reason, **kwargs): ...

Each is sent once the transaction that recorded the change has committed, never inside the guarded
write: a receiver sees only what is stored for good, a rolled-back finish sends nothing, and a
receiver's own queries cannot hold a row lock of the worker's. A receiver that raises is logged and
ignored: delivery never depends on a site's receiver. With no receiver connected nothing is read.
"""

import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from weave.edge import outside_text
from weave.events import log_event

logger = logging.getLogger("weave.notifications")

# Keyword arguments: notification (the Notification, as stored after the change), reason (text).
notification_delivered = Signal()
notification_failed = Signal()
notification_expired = Signal()
# Keyword arguments: device (the Device, inactive), reason (text).
device_deactivated = Signal()

_BY_STATUS = {"delivered": notification_delivered, "failed": notification_failed, "expired": notification_expired}


def send_notification_signals(changes: Iterable[tuple[Any, str, str]]) -> None:
    """After commit, send the signal of each (notification id, new status, reason) whose status has one."""
    from notifications.models import Notification

    wanted = [(pk, _BY_STATUS[status], reason) for pk, status, reason in changes if status in _BY_STATUS]
    wanted = [(pk, signal, reason) for pk, signal, reason in wanted if signal.has_listeners(Notification)]
    if not wanted:
        return

    def send() -> None:
        rows = Notification.objects.in_bulk([pk for pk, _, _ in wanted])
        for pk, signal, reason in wanted:
            if pk in rows:
                _send(signal, Notification, notification=rows[pk], reason=reason)

    transaction.on_commit(send)


def send_device_deactivated_signal(device_id: Any, reason: str) -> None:
    """After commit, send `device_deactivated` for the device."""
    from notifications.models import Device

    if not device_deactivated.has_listeners(Device):
        return

    def send() -> None:
        device = Device.objects.filter(pk=device_id).first()
        if device is not None:
            _send(device_deactivated, Device, device=device, reason=reason)

    transaction.on_commit(send)


def _send(signal: Signal, sender: type, **kwargs: Any) -> None:
    for receiver, answer in signal.send_robust(sender, **kwargs):
        if isinstance(answer, Exception):
            name = getattr(receiver, "__qualname__", repr(receiver))
            log_event(
                logger,
                "receiver_failed",
                job="signal",
                id="-",
                reason=outside_text(f"{name} raised {type(answer).__name__}: {answer}"),
                level=logging.WARNING,
            )

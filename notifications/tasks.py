"""Thin django-q2 entry points for the notifications app: all logic lives in `delivery`."""

from typing import Any

from notifications.delivery import drain as run_drain


def drain() -> dict[str, Any]:
    """Deliver due notifications (the django-q2 task)."""
    return run_drain().as_dict()


def sweep() -> dict[str, Any]:
    """Pick up expired leases and due retries even when nothing new arrives (scheduled every minute)."""
    return drain()

"""The baseline Weave is measured against: one django-q2 task per notification, no lease.

This is what a site without Weave would write: the task loads the row, POSTs it with httpx and
saves the status. It has none of Weave's guards, so two deliveries of the same task (django-q2 is
at-least-once) would both write. It exists only to be timed.
"""

import httpx
from django.utils import timezone

from notifications.models import Notification
from weave.conf import weave_settings

# One client per worker process, reused across tasks: the kindest version of the baseline
# (a client per task would add a TCP handshake to every notification).
_client: httpx.Client | None = None


def _http() -> httpx.Client:
    global _client
    if _client is None:
        _client = httpx.Client(timeout=weave_settings.PUSH_TIMEOUT)
    return _client


def send_push(notification_id: int) -> str:
    """Send one notification and save its status (the one-task-per-notification baseline)."""
    notification = Notification.objects.get(pk=notification_id)
    if notification.status != Notification.Status.PENDING:
        return notification.status
    response = _http().post(
        weave_settings.PUSH_URL,
        headers={
            "Authorization": f"Bearer {weave_settings.PUSH_TOKEN}",
            "Idempotency-Key": str(notification.idempotency_key),
        },
        json={
            "to": notification.device_token,
            "title": notification.title,
            "body": notification.body,
            "data": notification.data,
        },
    )
    notification.attempts += 1
    if response.is_success:
        notification.status = Notification.Status.DELIVERED
        notification.delivered_at = timezone.now()
    else:
        notification.status = Notification.Status.FAILED
        notification.last_error = f"HTTP {response.status_code}"
    notification.save(update_fields=["status", "attempts", "delivered_at", "last_error"])
    return notification.status


def noop() -> None:
    """Do nothing: the warm-up task that shows a cluster's workers are fetching."""

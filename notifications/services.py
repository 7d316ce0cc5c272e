"""Public API of the notifications app."""

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from notifications.models import Notification
from weave.conf import weave_settings
from weave.leases import DbNow


def notification_create(
    *, device_token: str, title: str, body: str, data: dict[str, Any] | None = None
) -> Notification:
    """Create a notification and enqueue its delivery once the transaction commits."""
    device_token = (device_token or "").strip()
    if not device_token:
        raise ValidationError({"device_token": "A device token is required."})
    if not (title or "").strip():
        raise ValidationError({"title": "A title is required."})
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
    transaction.on_commit(_enqueue_drain)
    return notification


def _enqueue_drain() -> None:
    from notifications.tasks import enqueue_drain

    enqueue_drain()

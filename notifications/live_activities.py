"""Live Activities on APNs: start, update and end them through their tokens, broadcast on channels, manage channels.

    live_activity_start(user=user, attributes_type="DeliveryAttributes", attributes={"order": "1234"},
                        content_state={"eta": "12:40"}, title="Your order is on its way", body="Arriving 12:40")
    live_activity_update(user=user, activity="order-1234", content_state={"eta": "12:55"})
    live_activity_end(user=user, activity="order-1234", content_state={"eta": "delivered"}, dismissal_date=soon)

    channel = live_activity_channel_create(backend="apns")          # iOS 18 broadcast channels
    live_activity_broadcast(backend="apns", channel=channel, event="update", content_state={"score": "2-1"})
    live_activity_channel_list(backend="apns"); live_activity_channel_delete(backend="apns", channel=channel)

Each send is a notification like any other (fenced, retried, with receipts), made for every active
Live Activity token of the user that the message is for: the push-to-start tokens of the attributes
type for a start, the update tokens of the named activity for an update or an end. The content is the
`live_activity` option (`notifications.live_content`), checked when the notification is made.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError

from notifications.backends.apns_channels import ChannelClient, ChannelError
from notifications.live_content import CHANNEL_ID, CHANNEL_PREFIX, START_PREFIX, UPDATE_PREFIX
from notifications.models import Device, Notification
from weave.conf import weave_settings

__all__ = [
    "ChannelError",
    "live_activity_broadcast",
    "live_activity_channel_create",
    "live_activity_channel_delete",
    "live_activity_channel_list",
    "live_activity_end",
    "live_activity_start",
    "live_activity_update",
]


def live_activity_start(
    *,
    user: Any,
    attributes_type: str,
    attributes: Mapping[str, Any],
    content_state: Mapping[str, Any],
    title: str,
    body: str = "",
    input_push_token: bool = True,
    input_push_channel: str | None = None,
    stale_date: datetime | int | None = None,
    relevance_score: float | None = None,
    ttl: int | None = None,
) -> list[Notification]:
    """Start an activity of `attributes_type` on each of `user`'s push-to-start tokens for it (an alert is required).

    `input_push_token` asks the new activity for an update token (iOS 18), which the app registers;
    `input_push_channel` subscribes it to a broadcast channel instead."""
    live = {
        "event": "start", "attributes_type": attributes_type, "attributes": attributes, "content_state": content_state,
        "input_push_token": input_push_token, "input_push_channel": input_push_channel, "stale_date": stale_date,
        "relevance_score": relevance_score,
    }  # fmt: skip
    if not title:
        raise ValidationError({"title": "A Live Activity start must alert the person: give it a title."})
    prefix = f"{START_PREFIX}{attributes_type}:" if isinstance(attributes_type, str) else START_PREFIX
    return _to_tokens(user, prefix, live, title=title, body=body, ttl=ttl, priority="high")


def live_activity_update(
    *,
    user: Any,
    activity: str,
    content_state: Mapping[str, Any],
    title: str = "",
    body: str = "",
    stale_date: datetime | int | None = None,
    relevance_score: float | None = None,
    priority: str = Notification.Priority.NORMAL,
    ttl: int | None = None,
) -> list[Notification]:
    """Update `activity` on each of its update tokens of `user`; a title or body adds an alert.

    `priority="high"` sends at APNs priority 10, which counts toward the hourly budget iOS allows."""
    live = {"event": "update", "activity": activity, "content_state": content_state, "stale_date": stale_date,
            "relevance_score": relevance_score}  # fmt: skip
    return _to_tokens(user, _update_prefix(activity), live, title=title, body=body, ttl=ttl, priority=priority)


def live_activity_end(
    *,
    user: Any,
    activity: str,
    content_state: Mapping[str, Any],
    dismissal_date: datetime | int | None = None,
    title: str = "",
    body: str = "",
    priority: str = Notification.Priority.HIGH,
    ttl: int | None = None,
) -> list[Notification]:
    """End `activity` with its final content state; `dismissal_date` says when it leaves the Lock Screen
    (in the past: at once; none: the system's default, up to four hours)."""
    live = {"event": "end", "activity": activity, "content_state": content_state, "dismissal_date": dismissal_date}
    return _to_tokens(user, _update_prefix(activity), live, title=title, body=body, ttl=ttl, priority=priority)


def live_activity_broadcast(
    *,
    backend: str,
    channel: str,
    event: str,
    content_state: Mapping[str, Any],
    title: str = "",
    body: str = "",
    stale_date: datetime | int | None = None,
    dismissal_date: datetime | int | None = None,
    relevance_score: float | None = None,
    priority: str = Notification.Priority.NORMAL,
    ttl: int | None = None,
) -> Notification:
    """Send one update (or the end) to every activity subscribed to `channel`: one notification, one request.

    Give a `ttl` only on a channel made with `stored=True`: APNs refuses an expiration on the others."""
    from notifications.services import notification_create

    if not isinstance(channel, str) or not CHANNEL_ID.fullmatch(channel):
        raise ValidationError({"channel": "A channel id is base64 text, as live_activity_channel_create gave it."})
    live = {"event": event, "content_state": content_state, "stale_date": stale_date, "dismissal_date": dismissal_date,
            "relevance_score": relevance_score}  # fmt: skip
    return notification_create(
        title=title, body=body, device_token=f"{CHANNEL_PREFIX}{channel}", backend=backend, ttl=ttl,
        priority=priority, options={"live_activity": _given(live)},
    )  # fmt: skip


def live_activity_channel_create(*, backend: str, stored: bool = False) -> str:
    """Create a broadcast channel on APNs backend `backend`; return its id for the app to subscribe with.

    `stored=False` (No Message Stored) suits frequent updates such as scores; `stored=True` keeps the
    latest message up to 8 hours for devices that were offline. Raises `ChannelError` when APNs refuses."""
    if not isinstance(stored, bool):
        raise ValidationError({"stored": "stored is true or false."})
    return _client(backend).create(stored=stored)


def live_activity_channel_list(*, backend: str) -> list[str]:
    """Every channel id APNs holds for the backend's app. Raises `ChannelError` when APNs gives no list."""
    return _client(backend).channels()


def live_activity_channel_delete(*, backend: str, channel: str) -> None:
    """Delete a channel for good (APNs may still deliver what it stored). Raises `ChannelError` on a refusal."""
    if not isinstance(channel, str) or not CHANNEL_ID.fullmatch(channel):
        raise ValidationError({"channel": "A channel id is base64 text, as live_activity_channel_create gave it."})
    _client(backend).delete(channel)


def _client(backend: Any) -> ChannelClient:
    if not isinstance(backend, str):
        raise ValidationError({"backend": "backend is the alias of an APNs backend."})
    try:
        return ChannelClient.for_backend(backend, timeout=weave_settings.PUSH_TIMEOUT)
    except ChannelError as exc:
        raise ValidationError({"backend": str(exc)}) from None


def _update_prefix(activity: Any) -> str:
    return f"{UPDATE_PREFIX}{activity}:" if isinstance(activity, str) else UPDATE_PREFIX


def _given(live: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in live.items() if value is not None}


def _to_tokens(
    user: Any, prefix: str, live: Mapping[str, Any], *, title: str, body: str, ttl: int | None, priority: str
) -> list[Notification]:
    """One notification per active token of `user` under `prefix`; the option is checked before any is made."""
    from notifications.content import check_options
    from notifications.services import notification_create

    options = check_options({"live_activity": _given(live)})  # every field refused by name, nothing stored
    if not isinstance(getattr(user, "pk", None), int | str) or user.pk is None:
        raise ValidationError({"user": "A saved user is required."})
    devices = Device.objects.active().filter(user_id=user.pk, token__startswith=prefix).order_by("pk")
    return [
        notification_create(device=device, title=title, body=body, ttl=ttl, priority=priority, options=options)
        for device in devices
    ]

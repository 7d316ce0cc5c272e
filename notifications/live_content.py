"""Live Activity content: the `live_activity` option, checked at creation, and its `aps` dictionary on the wire.

    options={"live_activity": {
        "event": "update",                        # start, update or end
        "activity": "order-1234",                 # which activity's update tokens get it (not for a channel)
        "content_state": {"eta": "12:40", "stops": 2},   # the app's ContentState, as its Codable decodes it
        "stale_date": aware_datetime,             # or Unix seconds; optional
        "relevance_score": 50,                    # optional
    }}

A start also names `attributes_type` (the app's ActivityAttributes type) and `attributes`, and may ask
for an update token (`input_push_token`) or subscribe the new activity to a channel
(`input_push_channel`); an end may carry a `dismissal_date`. `timestamp` is when the site decided the
content: the notification's creation time unless given, so a retried older update never looks newer
than a later one to the device. Dates are aware datetimes or whole Unix seconds within years 1970 to
9999; anything else (naive datetimes, floats, booleans, strings, out of range) is refused by name.

Tokens: a Live Activity token is stored with a prefix that says what it is for, so an ordinary alert
never goes to it and a Live Activity message never goes to a device token:
`liveactivity:<activity>:<hex>` (one activity's update token) and `liveactivity-start:<AttributesType>:<hex>`
(a push-to-start token, per attributes type). A broadcast channel is a target, never a device:
`channel:<base64 channel id>`.
"""

import math
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

EVENTS = ("start", "update", "end")
UPDATE_PREFIX = "liveactivity:"
START_PREFIX = "liveactivity-start:"
CHANNEL_PREFIX = "channel:"
ACTIVITY = re.compile(r"[A-Za-z0-9._~\-]{1,100}")
ATTRIBUTES_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")
# A channel id is base64 (Apple: "don't make assumptions on the channel ID size"); bounded here for storage.
CHANNEL_ID = re.compile(r"[A-Za-z0-9+/]{1,500}={0,2}")
EPOCH_MAX = 253_402_300_799  # 9999-12-31 23:59:59 UTC
_KEYS = {
    "event", "activity", "content_state", "attributes_type", "attributes", "stale_date", "dismissal_date",
    "relevance_score", "timestamp", "input_push_token", "input_push_channel",
}  # fmt: skip


class LiveActivityError(ValueError):
    """A `live_activity` option that cannot be sent; the message names the field."""


def epoch_seconds(value: Any, name: str) -> int:
    """Whole Unix seconds from an aware datetime or an int; raise LiveActivityError for anything else."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise LiveActivityError(f"live_activity.{name} must be a timezone-aware datetime.")
        try:
            seconds = value.timestamp()
        except (OverflowError, ValueError, OSError):
            raise LiveActivityError(f"live_activity.{name} is out of range.") from None
        value = math.floor(seconds)
    if isinstance(value, bool) or not isinstance(value, int):
        raise LiveActivityError(f"live_activity.{name} must be an aware datetime or whole Unix seconds.")
    if not 0 <= value <= EPOCH_MAX:
        raise LiveActivityError(f"live_activity.{name} must fall between 1970 and the year 9999.")
    return value


def check_live_activity(value: Any, *, now: float | None = None) -> dict[str, Any]:
    """Return the option as stored (dates as Unix seconds, timestamp defaulted), or raise LiveActivityError."""
    if not isinstance(value, Mapping):
        raise LiveActivityError("live_activity must be a JSON object.")
    if unknown := sorted(str(k)[:40] for k in set(value) - _KEYS):
        raise LiveActivityError(f"Unknown live_activity key {unknown[0]} (known: {', '.join(sorted(_KEYS))}).")
    event = value.get("event")
    if event not in EVENTS:
        raise LiveActivityError("live_activity.event must be one of start, update, end.")
    checked: dict[str, Any] = {"event": event, "content_state": _object(value.get("content_state"), "content_state")}
    checked.update(_event_fields(event, value))
    for name in ("stale_date", "dismissal_date"):
        if value.get(name) is not None:
            checked[name] = epoch_seconds(value[name], name)
    stamp = value.get("timestamp")
    checked["timestamp"] = epoch_seconds(stamp, "timestamp") if stamp is not None else int(now or time.time())
    if value.get("relevance_score") is not None:
        checked["relevance_score"] = _score(value["relevance_score"])
    return checked


def _event_fields(event: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """What only some events take: a start's attributes and inputs, an end's dismissal, the activity's name."""
    fields: dict[str, Any] = {}
    if value.get("activity") is not None:
        fields["activity"] = _pattern(value["activity"], ACTIVITY, "activity", "1 to 100 of A-Z a-z 0-9 . _ ~ -")
    if event == "start":
        kind = _pattern(value.get("attributes_type"), ATTRIBUTES_TYPE, "attributes_type", "a Swift type name")
        fields.update(attributes_type=kind, attributes=_object(value.get("attributes"), "attributes"))
        if value.get("input_push_token") is not None:
            if not isinstance(value["input_push_token"], bool):
                raise LiveActivityError("live_activity.input_push_token must be true or false.")
            fields["input_push_token"] = value["input_push_token"]
        if value.get("input_push_channel") is not None:
            fields["input_push_channel"] = _pattern(value["input_push_channel"], CHANNEL_ID, "input_push_channel",
                                                    "a base64 channel id")  # fmt: skip
    else:
        for name in ("attributes_type", "attributes", "input_push_token", "input_push_channel"):
            if value.get(name) is not None:
                raise LiveActivityError(f"live_activity.{name} goes with event start only.")
    if event != "end" and value.get("dismissal_date") is not None:
        raise LiveActivityError("live_activity.dismissal_date goes with event end only.")
    return fields


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise LiveActivityError(f"live_activity.{name} must be a JSON object (the app's Codable type).")
    return dict(value)


def _pattern(value: Any, pattern: re.Pattern[str], name: str, what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise LiveActivityError(f"live_activity.{name} must be {what}.")
    return value


def _score(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise LiveActivityError("live_activity.relevance_score must be a finite number of at least 0.")
    return value


def live_aps(*, title: str, body: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The `aps` dictionary of a Live Activity push (an alert only when the message has a title or body)."""
    live = options["live_activity"]
    aps: dict[str, Any] = {
        "timestamp": live["timestamp"],
        "event": live["event"],
        "content-state": live["content_state"],
    }
    for ours, theirs in (("stale_date", "stale-date"), ("dismissal_date", "dismissal-date"),
                         ("relevance_score", "relevance-score"), ("attributes_type", "attributes-type"),
                         ("attributes", "attributes"), ("input_push_channel", "input-push-channel")):  # fmt: skip
        if ours in live:
            aps[theirs] = live[ours]
    if live.get("input_push_token"):
        aps["input-push-token"] = 1
    if title or body:
        aps["alert"] = {"title": title, "body": body}
        if "sound" in options:
            aps["alert"]["sound"] = options["sound"]
    return aps


def target_problem(token: str, options: Mapping[str, Any]) -> str:
    """Why a message cannot go to `token` on APNs ("" when it can): Live Activity content goes to Live Activity
    tokens (of its activity, or of its attributes type for a start) or a channel, and nothing else does."""
    live = options.get("live_activity")
    kind = token_kind(token)
    if live is None:
        return "" if kind == "device" else "a Live Activity token or a channel takes Live Activity messages only"
    if kind == "device":
        return "a Live Activity message goes to a Live Activity token or a channel, not to a device token"
    if kind == "channel":
        return "" if live["event"] != "start" else "a channel cannot start a Live Activity (a push-to-start token can)"
    name = token.split(":", 2)[1]
    if live["event"] == "start":
        wanted = live["attributes_type"]
        return "" if kind == "start" and name == wanted else f"not a push-to-start token for {wanted}"
    activity = live.get("activity")
    if kind == "start":
        return "a push-to-start token only starts activities"
    if activity is None:
        return "name the activity (live_activity.activity) whose update tokens get it"
    return "" if name == activity else f"the update token of another activity than {activity}"


def token_kind(token: str) -> str:
    """ "device", "update" (an activity's update token), "start" (a push-to-start token) or "channel"."""
    if token.startswith(UPDATE_PREFIX):
        return "update"
    if token.startswith(START_PREFIX):
        return "start"
    if token.startswith(CHANNEL_PREFIX):
        return "channel"
    return "device"

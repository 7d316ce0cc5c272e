"""What a notification shows beyond its title and body: typed options, checked at creation, mapped per platform.

    notification_create(..., options={
        "subtitle": "Order 1234", "badge": 3, "sound": "default", "image": "https://cdn.example/p.png",
        "body_loc_key": "ORDER_SHIPPED", "body_loc_args": ["1234"],
        "apns": {"interruption_level": "time-sensitive"},
        "android": {"channel_id": "orders", "color": "#3366ff"},
        "webpush": {"icon": "https://cdn.example/i.png", "require_interaction": True},
    })

The common keys apply to every platform that has them; `apns`, `android` and `webpush` hold the
overrides one platform alone understands (in the spirit of firebase-admin's `APNSConfig`,
`AndroidConfig` and `WebpushConfig`). Options are stored checked and compact, so the admin shows what
went out, and each backend maps them to its wire format with the functions below (pure, no I/O).

A notification with data and neither title nor body is a silent (background) push: APNs
`push-type: background` at priority 5, an FCM data-only message, a Web Push payload with only data.
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ValidationError

from notifications.live_content import LiveActivityError, check_live_activity

FIELD = "options"
# A notification's device_token with one of these prefixes goes to an FCM topic or condition, never a device.
TOPIC_PREFIX, CONDITION_PREFIX = "topic:", "condition:"
_TEXT_MAX = 256
_URL = re.compile(r"https://[^\s\"'<>]{1,2000}")
# FCM's analytics labels (fcm_options.analytics_label): what firebase-admin and the v1 API accept.
_ANALYTICS_LABEL = re.compile(r"[a-zA-Z0-9\-_.~%]{1,50}")
_COLOR = re.compile(r"#[0-9a-fA-F]{6}")


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > _TEXT_MAX or not value.isprintable():
        raise ValueError(f"printable text of 1 to {_TEXT_MAX} characters")
    return value


def _matching(pattern: re.Pattern[str], expected: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ValueError(expected)
        return value

    return check


_url = _matching(_URL, "an https:// URL")
_label = _matching(_ANALYTICS_LABEL, "1 to 50 of the characters a-z A-Z 0-9 - _ . ~ %")
_color = _matching(_COLOR, "a colour as #rrggbb")


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 99_999:
        raise ValueError("a whole number from 0 to 99999")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false")
    return value


def _texts(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > 20:
        raise ValueError("a list of at most 20 texts")
    return [_text(item) for item in value]


def _one_of(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError("one of " + ", ".join(choices))
        return str(value)

    return check


def _score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError("a number from 0 to 1")
    return float(value)


def _actions(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or len(value) > 4:
        raise ValueError("a list of at most 4 actions")
    checked = []
    for item in value:
        keys = set(item) if isinstance(item, dict) else set()
        if (
            not isinstance(item, dict)
            or keys - {"action", "title", "icon", "navigate"}
            or not {"action", "title"} <= keys
        ):
            raise ValueError('actions of {"action", "title"} (and an optional "icon" and "navigate" URL)')
        checked.append({k: (_url(v) if k in ("icon", "navigate") else _text(v)) for k, v in item.items()})
    return checked


# Apple's documented `aps` dictionary keys; anything else in a raw `aps` merge is refused, as APNs would.
APS_KEYS = frozenset(
    "alert badge sound thread-id category content-available mutable-content target-content-id "
    "interruption-level relevance-score filter-criteria stale-date content-state timestamp event "
    "dismissal-date attributes-type attributes input-push-token input-push-channel".split()
)


def _aps(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("a JSON object of Apple's aps keys")
    if unknown := sorted(set(value) - APS_KEYS):
        raise ValueError(f"Apple's aps keys only (not {', '.join(unknown)})")
    return dict(value)


COMMON: dict[str, Callable[[Any], Any]] = {
    "subtitle": _text,
    "image": _url,
    "sound": _text,
    "badge": _count,
    "category": _text,  # APNs category, FCM click_action
    "thread_id": _text,  # APNs thread-id, Android tag group
    "title_loc_key": _text,
    "title_loc_args": _texts,
    "body_loc_key": _text,
    "body_loc_args": _texts,
    "analytics_label": _label,  # FCM fcm_options.analytics_label (Firebase's delivery data)
}
PLATFORMS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "apns": {
        "mutable_content": _flag,
        "content_available": _flag,
        "interruption_level": _one_of("passive", "active", "time-sensitive", "critical"),
        "relevance_score": _score,
        "aps": _aps,
        "analytics_label": _label,  # FCM apns.fcm_options.analytics_label; direct APNs has no such field
    },
    "android": {
        "channel_id": _text,
        "notification_priority": _one_of(
            "PRIORITY_MIN", "PRIORITY_LOW", "PRIORITY_DEFAULT", "PRIORITY_HIGH", "PRIORITY_MAX"
        ),
        "color": _color,
        "icon": _text,
        "tag": _text,
        "visibility": _one_of("PRIVATE", "PUBLIC", "SECRET"),
        "proxy": _one_of("ALLOW", "DENY", "IF_PRIORITY_LOWERED"),
        # Message-level Android switches (android.*, not android.notification.*):
        "direct_boot_ok": _flag,
        "bandwidth_constrained_ok": _flag,
        "restricted_satellite_ok": _flag,
        "analytics_label": _label,  # android.fcm_options.analytics_label
    },
    "webpush": {
        "icon": _url,
        "badge": _url,
        "actions": _actions,
        "require_interaction": _flag,
        "renotify": _flag,
        "silent": _flag,
        "lang": _text,
        "dir": _one_of("auto", "ltr", "rtl"),
        # Declarative Web Push (the browser shows it without a service worker, where the subscription can):
        "navigate": _url,  # where a click goes; required with declarative
        "declarative": _flag,
        "app_badge": _count,  # the app's badge, set by the browser
        "mutable": _flag,  # the service worker may still change the notification first
    },
}
# Web Push options that shape the declarative message itself, not the notification a service worker shows.
DECLARATIVE_ONLY = ("declarative", "app_badge", "mutable")


def check_options(value: Any) -> dict[str, Any]:
    """Return `value` as stored (unknown keys refused, each value checked); raise `ValidationError` naming the key."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError({FIELD: f"options must be a JSON object, not {type(value).__name__}."})
    checked: dict[str, Any] = {}
    for key, item in value.items():
        if key == "live_activity":
            checked[key] = _live_activity(item)
        elif key in PLATFORMS:
            if not isinstance(item, Mapping):
                raise ValidationError({FIELD: f"options[{key!r}] must be a JSON object."})
            checked[key] = {name: _checked(PLATFORMS[key], name, v, where=f"{key}.") for name, v in item.items()}
        else:
            checked[key] = _checked(COMMON, key, item)
    if checked.get("webpush", {}).get("declarative") and "navigate" not in checked["webpush"]:
        raise ValidationError({FIELD: "options webpush.declarative needs webpush.navigate (where a click goes)."})
    return checked


def _live_activity(value: Any) -> dict[str, Any]:
    try:
        return check_live_activity(value)
    except LiveActivityError as exc:
        raise ValidationError({FIELD: str(exc)}) from None


def _checked(table: Mapping[str, Callable[[Any], Any]], name: Any, value: Any, *, where: str = "") -> Any:
    check = table.get(name) if isinstance(name, str) else None
    if check is None:
        known = ", ".join(sorted(table))
        raise ValidationError({FIELD: f"Unknown option {where}{name!s:.40} (known: {known})."})
    try:
        return check(value)
    except ValueError as exc:
        raise ValidationError({FIELD: f"options {where}{name} must be {exc}."}) from None


def is_silent(title: str, body: str) -> bool:
    """Whether a message is a background (data-only) push: nothing to show."""
    return not title and not body


# --- per platform ----------------------------------------------------------------------------------------


def apns_aps(*, title: str, body: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The `aps` dictionary for APNs (direct, or inside an FCM message's apns payload)."""
    mine = options.get("apns", {})
    if is_silent(title, body):
        return {"content-available": 1}
    alert: dict[str, Any] = {"title": title, "body": body}
    for ours, theirs in (
        ("subtitle", "subtitle"),
        ("title_loc_key", "title-loc-key"),
        ("title_loc_args", "title-loc-args"),
        ("body_loc_key", "loc-key"),
        ("body_loc_args", "loc-args"),
    ):
        if ours in options:
            alert[theirs] = options[ours]
    aps: dict[str, Any] = {"alert": alert}
    for ours, theirs in (("sound", "sound"), ("badge", "badge"), ("category", "category"), ("thread_id", "thread-id")):
        if ours in options:
            aps[theirs] = options[ours]
    # An image needs the app's notification service extension, which only runs for mutable content.
    if mine.get("mutable_content") or "image" in options:
        aps["mutable-content"] = 1
    if mine.get("content_available"):
        aps["content-available"] = 1
    if "interruption_level" in mine:
        aps["interruption-level"] = mine["interruption_level"]
    if "relevance_score" in mine:
        aps["relevance-score"] = mine["relevance_score"]
    return {**aps, **mine.get("aps", {})}


def apns_extra(options: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level APNs payload keys besides `aps` (the image URL, for the app's service extension)."""
    return {"image": options["image"]} if "image" in options else {}


def fcm_notification(*, title: str, body: str, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """FCM v1's cross-platform `notification` block, or None for a data-only message."""
    if is_silent(title, body):
        return None
    block = {"title": title, "body": body}
    if "image" in options:
        block["image"] = options["image"]
    return block


# Android options that belong to FCM's AndroidConfig itself, not to its notification block.
ANDROID_CONFIG = ("direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok")


def fcm_android_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """The AndroidConfig fields set by options: the delivery switches and `fcm_options.analytics_label`."""
    mine = options.get("android", {})
    config: dict[str, Any] = {key: mine[key] for key in ANDROID_CONFIG if key in mine}
    if "analytics_label" in mine:
        config["fcm_options"] = {"analytics_label": mine["analytics_label"]}
    return config


def fcm_options(options: Mapping[str, Any], platform: str = "") -> dict[str, Any]:
    """A v1 `fcm_options` block (the message's, or `platform`'s: "apns"), or {} when no label is set."""
    mine = options.get(platform, {}) if platform else options
    return {"analytics_label": mine["analytics_label"]} if "analytics_label" in mine else {}


def fcm_android_notification(*, tag: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """FCM v1's `android.notification` (not sent for a data-only message)."""
    block: dict[str, Any] = {"tag": tag}
    for ours, theirs in (
        ("sound", "sound"),
        ("category", "click_action"),
        ("title_loc_key", "title_loc_key"),
        ("title_loc_args", "title_loc_args"),
        ("body_loc_key", "body_loc_key"),
        ("body_loc_args", "body_loc_args"),
        ("badge", "notification_count"),
    ):
        if ours in options:
            block[theirs] = options[ours]
    skip = {*ANDROID_CONFIG, "analytics_label"}
    block.update((key, value) for key, value in options.get("android", {}).items() if key not in skip)
    return block


def webpush_fields(*, title: str, body: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The Notification API options a site's service worker passes to `showNotification` (empty when silent)."""
    if is_silent(title, body):
        return {}
    fields: dict[str, Any] = {}
    if "image" in options:
        fields["image"] = options["image"]
    names = {"require_interaction": "requireInteraction"}
    for key, value in options.get("webpush", {}).items():
        if key not in DECLARATIVE_ONLY:
            fields[names.get(key, key)] = value
    return fields


def fcm_webpush(*, title: str, body: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """FCM v1's `webpush` block without its headers: the notification, and the click's link as FCM takes it."""
    block: dict[str, Any] = {}
    shown = webpush_fields(title=title, body=body, options=options)
    if navigate := shown.pop("navigate", None):
        block["fcm_options"] = {"link": navigate}
    if shown:
        block["notification"] = {"title": title, "body": body, **shown}
    return block


def declarative_web_push(
    *, title: str, body: str, data: Mapping[str, Any], tag: str, options: Mapping[str, Any]
) -> dict[str, Any] | None:
    """A declarative push message (`"web_push": 8030`) the browser shows itself, or None when the message
    asks for none (or is silent: a declarative message always shows something)."""
    mine = options.get("webpush", {})
    if not mine.get("declarative") or is_silent(title, body):
        return None
    navigate = mine["navigate"]
    notification: dict[str, Any] = {"title": title, "body": body, "navigate": navigate, "tag": tag}
    if "image" in options:
        notification["image"] = options["image"]
    for key in ("lang", "dir", "icon", "badge", "renotify", "silent", "require_interaction"):
        if key in mine:
            notification[key] = mine[key]
    if data:
        notification["data"] = dict(data)
    if "actions" in mine:
        notification["actions"] = [{"navigate": navigate, **action} for action in mine["actions"]]
    message: dict[str, Any] = {"web_push": 8030, "notification": notification}
    if "app_badge" in mine:
        message["app_badge"] = mine["app_badge"]
    if mine.get("mutable"):
        message["mutable"] = True
    return message

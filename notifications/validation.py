"""Validation of a notification's content and of device tokens: each field's type and text, and the size actually sent.

`notification_create` and `notification_check` call these before writing anything; each raises a
`ValidationError` keyed by the field at fault.
"""

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from notifications.backends.base import TokenError
from weave.conf import weave_settings
from weave.edge import check_text, json_bytes

if TYPE_CHECKING:
    from notifications.backends.base import PushBackend

# The model's column widths; kept here so validation needs no model import (and no app registry).
DEVICE_TOKEN_MAX = 2048
TITLE_MAX = 200
# How far from now a send may be scheduled, either way. A year ahead covers any reminder a site plans;
# beyond it a date is a mistake (a "never" sentinel, a year typed wrong), and at the calendar's end the
# time plus a TTL, or in another zone, is past what Python and the database can hold. A time in the past
# is due at once; one more than this far back is refused as a mistake too.
SEND_AT_WINDOW = timedelta(days=366)


def check_send_at(value: Any, *, now: datetime, field: str = "send_at") -> datetime:
    """Return `value` if it is an aware datetime within SEND_AT_WINDOW of `now`; raise a ValidationError otherwise.

    `now` is a rough now (`Clock.rough_now()`): the bound is a year wide, so a host's skew cannot matter."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError({field: f"{field} must be a timezone-aware datetime."})
    days = SEND_AT_WINDOW.days
    try:
        distance = abs(value - now)
    except OverflowError:  # only at the calendar's ends: far outside the window anyway
        distance = timedelta.max
    if distance > SEND_AT_WINDOW:
        raise ValidationError(
            {field: f"{field} must be within {days} days of now (it is {value.isoformat()}); a scheduled send "
             f"goes at most {days} days ahead."}
        )  # fmt: skip
    return value


def check_device_token(value: Any, *, field: str = "device_token") -> str:
    """Return the stripped token, or raise: printable text on one line (it may travel in a URL or a header),
    at most DEVICE_TOKEN_MAX characters and as many UTF-8 bytes (the unique index on tokens has a row limit)."""
    text = check_text(
        value,
        field=field,
        required=True,
        strip=True,
        one_line=True,
        max_chars=DEVICE_TOKEN_MAX,
        required_message="A device token is required.",
    )
    if not text.isprintable():
        raise ValidationError({field: f"{field} holds a character that is not printable."})
    if len(text.encode("utf-8")) > DEVICE_TOKEN_MAX:
        raise ValidationError({field: f"{field} has at most {DEVICE_TOKEN_MAX} bytes in UTF-8."})
    return text


def canonical_device_token(value: Any, *, backend_cls: "type[PushBackend]", field: str = "device_token") -> str:
    """Return `value` as `backend_cls` stores and sends it, or raise a ValidationError naming `field`.

    First plain text (type, NUL, lone surrogates, control characters, length), then the backend's own
    format (`canonical_token`), then once more the rules every stored token obeys. A pretty-printed Web
    Push subscription spans lines: only its compact canonical form has to be one line."""
    text = check_text(
        value,
        field=field,
        required=True,
        strip=True,
        max_chars=DEVICE_TOKEN_MAX,
        required_message="A device token is required.",
    )
    try:
        canonical = backend_cls.canonical_token(text)
    except TokenError as exc:
        raise ValidationError({field: str(exc)}) from exc
    return check_device_token(canonical, field=field)


def check_payload_size(*, title: str, body: str, data: Any, options: Any = None) -> int:
    """Raise if the message is over WEAVE PUSH_MAX_PAYLOAD_BYTES; return its size.

    The size is the UTF-8 bytes of the compact JSON actually sent (never the ASCII-escaped form, three
    times larger for non-Latin text), without the token, which travels in the URL or a header.
    """
    limit = weave_settings.PUSH_MAX_PAYLOAD_BYTES
    size = len(json_bytes({"title": title, "body": body, "data": data, "options": options or {}}))
    if size <= limit:
        return size
    # Name the field that takes most of the room: that is the one to shorten.
    shares = {"title": len(json_bytes(title)), "body": len(json_bytes(body)), "data": len(json_bytes(data))}
    shares["options"] = len(json_bytes(options or {}))
    field = max(shares, key=lambda name: shares[name])
    raise ValidationError(
        {
            field: f"Payload is {size} bytes (UTF-8 JSON as sent); the provider limit is {limit} bytes "
            f"(WEAVE PUSH_MAX_PAYLOAD_BYTES). {field} takes {shares[field]} bytes of it."
        }
    )

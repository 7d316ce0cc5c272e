"""Validation of a notification's content: each field's type and text, and the size actually sent.

`check_message()` is what `notification_create` (and any later service that creates or changes a
notification) calls before writing anything. It raises a `ValidationError` keyed by the field at
fault and returns the cleaned values.
"""

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from weave.conf import weave_settings
from weave.validation import check_json, check_text, json_bytes

# The model's column widths; kept here so validation needs no model import (and no app registry).
DEVICE_TOKEN_MAX = 2048
TITLE_MAX = 200


@dataclass(frozen=True)
class Message:
    """A notification's content, checked."""

    device_token: str
    title: str
    body: str
    data: dict[str, Any]

    def wire_payload(self) -> dict[str, Any]:
        """The JSON object a push provider is sent for this message."""
        return {"to": self.device_token, "title": self.title, "body": self.body, "data": self.data}


def check_device_token(value: Any, *, field: str = "device_token") -> str:
    """Return the stripped token, or raise: opaque text on one line (it may travel in a URL or a header)."""
    return check_text(
        value,
        field=field,
        required=True,
        strip=True,
        one_line=True,
        max_chars=DEVICE_TOKEN_MAX,
        required_message="A device token is required.",
    )


def check_message(*, device_token: Any, title: Any, body: Any, data: Any = None) -> Message:
    """Check every field of a notification and the size of what would be sent; return the cleaned values."""
    message = Message(
        device_token=check_device_token(device_token),
        title=check_text(
            title, field="title", required=True, max_chars=TITLE_MAX, required_message="A title is required."
        ),
        body=check_text(body, field="body"),
        data=check_json({} if data is None else data, field="data", object_only=True),
    )
    check_payload_size(title=message.title, body=message.body, data=message.data)
    return message


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

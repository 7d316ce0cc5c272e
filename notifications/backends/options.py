"""Checks and small mappings the provider backends share: required options, readable key files, collapse ids."""

import base64
import hashlib
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from notifications.backends.base import Outcome, PushMessage, SendResult


def missing(options: Mapping[str, Any], *names: str) -> list[str]:
    """One sentence per required option that is absent or empty."""
    return [f"OPTIONS[{name!r}] is required." for name in names if not options.get(name)]


def unreadable(options: Mapping[str, Any], *names: str) -> list[str]:
    """One sentence per file option that is set but cannot be read by this process."""
    problems = []
    for name in names:
        path = options.get(name)
        if not path:
            continue
        if not isinstance(path, str | os.PathLike):
            problems.append(f"OPTIONS[{name!r}] must be a file path.")
        elif not os.path.isfile(path):
            problems.append(f"OPTIONS[{name!r}] = {str(path)!r} is not a file.")
        elif not os.access(path, os.R_OK):
            problems.append(f"OPTIONS[{name!r}] = {str(path)!r} is not readable by this process.")
    return problems


def unknown(options: Mapping[str, Any], known: set[str]) -> list[str]:
    """A sentence naming option keys the backend does not know (a typo would otherwise be ignored)."""
    extra = sorted(set(options) - known)
    return [f"Unknown OPTIONS {', '.join(map(repr, extra))}; known: {', '.join(sorted(known))}."] if extra else []


_TOPIC_RE = re.compile(r"^[A-Za-z0-9_\-]{1,32}$")


def short_key(key: str, *, limit: int, alphabet_ok: re.Pattern[str] | None = None) -> str:
    """Return `key` if it fits (`limit` bytes, and the alphabet when given), else a stable digest that does.

    The same notification always maps to the same value, so a resend replaces rather than stacks.
    """
    fits = len(key.encode()) <= limit and (alphabet_ok is None or alphabet_ok.match(key))
    if fits:
        return key
    digest = base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()).rstrip(b"=").decode()
    return digest[:limit]


def web_push_topic(key: str) -> str:
    """A Web Push `Topic` (at most 32 characters of the URL-safe base64 alphabet) for a collapse key."""
    compact = key.replace("-", "") if re.fullmatch(r"[0-9a-fA-F\-]{36}", key) else key  # a UUID fits in 32
    return short_key(compact, limit=32, alphabet_ok=_TOPIC_RE)


def ttl_to_send(message: PushMessage) -> int | None:
    """Seconds of life to give the provider: None (no expiry), 0 (already expired: do not send), else at least 1.

    Less than a second left is rounded up to one, not down to zero: zero means "deliver now or never" to
    APNs and Web Push, and the worker has already judged the row unexpired on the database clock."""
    if message.expires_at is None:
        return None
    left = (message.expires_at - datetime.now(UTC)).total_seconds()
    return 0 if left <= 0 else max(1, int(left))


def expired_before_sending(message: PushMessage) -> SendResult:
    """The answer for a message whose remaining TTL ran out before it left: never sent, never retried."""
    when = f"{message.expires_at:%Y-%m-%d %H:%M:%S} UTC" if message.expires_at else "its expiry"
    return SendResult(
        outcome=Outcome.PERMANENT, reason=f"Not sent: the notification expired at {when} before it left.", sent=False
    )


class DataError(ValueError):
    """A notification's `data` that a backend cannot send; the message names the key."""

"""The one retry policy both apps share: backoff with jitter, `Retry-After`, and what an HTTP answer means.

Pure functions, no database, no I/O: the push worker and the supplier-services client both call them,
so a fix here fixes both.
"""

import random
import time
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum


def backoff_seconds(attempt: int, *, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Return the delay before retry number `attempt` (1-based): base·2^(attempt-1), capped, with equal jitter."""
    delay: float = min(cap, base * (2 ** max(0, attempt - 1)))
    # Equal jitter: at least half the delay (the backoff still grows), the rest random so that jobs
    # failed together by one outage do not all come due in the same instant.
    jitter = rng.uniform(0, delay / 2) if rng is not None else random.uniform(0, delay / 2)
    return delay / 2 + jitter


def parse_retry_after(value: str | None, date_header: str | None = None) -> float | None:
    """Return the delay a Retry-After header asks for, in seconds (delta-seconds or HTTP-date), or None.

    An HTTP-date is measured against the peer's own `Date` header when it sent one, so neither side's
    clock skew leaks into the delay; otherwise against this host's clock.
    """
    if not value:
        return None
    value = value.strip()
    # ASCII digits only: str.isdigit() also accepts "²" and other digits float() refuses.
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    reference: datetime | None = None
    if date_header:
        try:
            reference = parsedate_to_datetime(date_header)
        except (TypeError, ValueError, IndexError):
            reference = None
    try:
        now = reference.timestamp() if reference is not None else time.time()
        return max(0.0, when.timestamp() - now)
    except (OverflowError, ValueError, OSError):
        return None


class HttpClass(StrEnum):
    """What an HTTP status means for a retry decision, before any protocol-specific reading."""

    SUCCESS = "success"  # 2xx
    REDIRECT = "redirect"  # 3xx: never followed; a misconfigured URL, systemic, never the message's fault
    THROTTLED = "throttled"  # 429
    TIMEOUT = "timeout"  # 408: the peer gave up reading the request
    AUTH = "auth"  # 401, 403: our credentials
    SERVER = "server"  # 5xx
    CLIENT = "client"  # other 4xx: this request will never be accepted as it is
    INVALID = "invalid"  # 1xx or out of range: a broken peer, systemic


def http_class(status: int) -> HttpClass:
    """Return the retry class of an HTTP status code."""
    if 200 <= status < 300:
        return HttpClass.SUCCESS
    if 300 <= status < 400:
        return HttpClass.REDIRECT
    if status == 429:
        return HttpClass.THROTTLED
    if status == 408:
        return HttpClass.TIMEOUT
    if status in (401, 403):
        return HttpClass.AUTH
    if 500 <= status < 600:
        return HttpClass.SERVER
    if 400 <= status < 500:
        return HttpClass.CLIENT
    return HttpClass.INVALID


def is_json_content_type(content_type: str | None) -> bool:
    """Return whether a Content-Type names JSON (`application/json`, `application/problem+json`, ...)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")

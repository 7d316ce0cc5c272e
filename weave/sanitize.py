"""Make text from outside (provider and service answers, exception messages) safe to store and log.

Whatever a peer sends may hold NUL bytes, invalid UTF-8, lone surrogates, control characters that
forge log lines, megabytes of HTML, or our own credentials echoed back. PostgreSQL refuses NUL in
text, and a refused finish must never jam a job, so every piece of outside text goes through
`outside_text()` before it reaches a table, a log line or a page.
"""

import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

SNIPPET = 300
REDACTED = "[redacted]"

# Credentials that an echoing peer (or an exception message) may carry, whatever the secret's value.
_CREDENTIALS = re.compile(
    # "key <x>" alone is not a credential ("sent key <uuid>"); FCM's legacy "Authorization: key=..." is.
    r"(?i)(authorization\s*[:=]\s*(?:(?:bearer|basic|token)\s+|key=)?|\b(?:bearer|basic)\s+)[^\s\"',;]+"
    # URL userinfo, with or without a password: a token alone as the user name is a credential too.
    r"|(?<=://)[^/@\s]+@"
)
# C0 and C1 controls, DEL, and line/paragraph separators: one event must stay one line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def decode(raw: bytes | str) -> str:
    """Return `raw` as text: invalid UTF-8 and lone surrogates become U+FFFD."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return _SURROGATE.sub("\ufffd", text)


def escape_controls(text: str) -> str:
    """Escape control characters (newlines included) as visible `\\xNN` / `\\uNNNN` sequences."""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Replace known secret values, credential headers and URL userinfo with `[redacted]`."""
    text = _replace_secrets(text, secrets)
    return _CREDENTIALS.sub(lambda m: (m.group(1) or "") + REDACTED if m.group(1) else f"{REDACTED}@", text)


def safe_url(url: str) -> str:
    """Return `url` without its userinfo (a password in a URL is still a password)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{REDACTED}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def truncate(text: str, limit: int = SNIPPET) -> str:
    """Cut `text` to at most `limit` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# The same controls less newline and tab: a traceback keeps its lines, nothing else that could forge one.
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
TRACEBACK_LIMIT = 20_000


def multiline_text(raw: bytes | str, *, secrets: Iterable[str] = (), limit: int = TRACEBACK_LIMIT) -> str:
    """Return outside text that keeps its lines (a traceback): decoded, redacted, bounded, with real newlines.

    Newlines and tabs stay; carriage returns, NUL and every other control character are escaped as
    `outside_text` escapes them. A cut keeps the end, where a traceback names the error.
    """
    text = redact(decode(raw).replace("\r\n", "\n"), secrets)
    text = _CONTROL_BUT_LINES.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )
    return text if len(text) <= limit else "…" + text[len(text) - limit + 1 :]


def outside_text(raw: bytes | str, *, secrets: Iterable[str] = (), limit: int = SNIPPET) -> str:
    """Return outside text fit for a table, a log line or the admin: decoded, redacted, one line, bounded."""
    secrets = secrets if isinstance(secrets, list | tuple) else tuple(secrets)  # read twice below
    if raw.isascii():
        # Most of it (a message id, an empty reason, a short error) is printable ASCII without a credential's
        # marks: there decode and escape_controls change nothing and the credentials pattern cannot match.
        # The same answer without the four regex passes, for the texts every push stores.
        text = raw.decode("ascii") if isinstance(raw, bytes) else raw
        if text.isprintable():
            text = _replace_secrets(text, secrets)
            lowered = text.lower()
            if not any(mark in lowered for mark in _CREDENTIAL_MARKS):
                return truncate(text, limit)
    return truncate(escape_controls(redact(decode(raw), secrets)), limit)


# What `_CREDENTIALS` cannot match without, in ASCII text: its literal words (matched ignoring case) and "://".
_CREDENTIAL_MARKS = ("authorization", "bearer", "basic", "://")


def _replace_secrets(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text

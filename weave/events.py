"""One structured log line per job event, so a log search by id tells the same story as the admin.

log_event(logger, "claim", job="notification", id=42, owner="host:123:ab12", fence=3)
-> event=claim job=notification id=42 owner=host:123:ab12 fence=3

Every value is made safe before it is printed: control characters (newlines included) are escaped,
credentials, URL userinfo and the site's configured secrets are redacted, and a value with a space, a
quote or `=` is quoted. So one event is always exactly one line, and a supplier named
"x\\nevent=completed" cannot forge another.
"""

import logging
from typing import Any

from weave.conf import secret_values
from weave.sanitize import escape_controls, redact

__all__ = [
    "RedactedTracebacks",
    "log_event",
]

# Events that mean something went wrong for the job, logged at WARNING.
_WARN = {"lease_lost", "blocked", "renewal_failed", "renewal_retry", "failed", "crashed", "unknown"}
# A log line is not an archive: a value longer than this is cut (reasons are already bounded).
_MAX_VALUE = 2000


def _fmt(value: Any, secrets: list[str]) -> str:
    text = escape_controls(redact(str(value), secrets))
    if len(text) > _MAX_VALUE:
        text = text[: _MAX_VALUE - 1] + "…"
    if not text or any(c.isspace() or c in '"=' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _key(name: str) -> str:
    # Keys come from our own code, but a key that is not a plain word would break the format all the same.
    return name if name.replace("_", "").isalnum() and name.isascii() else _fmt(name, [])


def log_event(
    logger: logging.Logger,
    event: str,
    *,
    job: str,
    id: Any,
    owner: str | None = None,
    fence: int | None = None,
    reason: str = "",
    level: int | None = None,
    **extra: Any,
) -> None:
    """Log `event` for one job as `key=value` pairs on one line: job type, id, owner, fence, reason, extras.

    `level` overrides the event's default (WARNING for trouble, INFO otherwise); hot paths log their
    per-item events at DEBUG. Nothing is formatted for a level the logger would drop.
    """
    if level is None:
        level = logging.WARNING if event in _WARN else logging.INFO
    if not logger.isEnabledFor(level):
        return
    fields = {"event": event, "job": job, "id": id, "owner": owner, "fence": fence, **extra}
    if reason:
        fields["reason"] = reason
    # The site's configured secrets too: a gateway's refusal may quote a bare token, with no marker before it.
    secrets = secret_values()
    line = " ".join(f"{_key(k)}={_fmt(v, secrets)}" for k, v in fields.items() if v is not None)
    # The structured copy (for JSON log handlers) is redacted too; it keeps its types and newlines.
    structured = {k: redact(v, secrets) if isinstance(v, str) else v for k, v in fields.items()}
    logger.log(level, line, extra={"weave": structured})


class RedactedTracebacks(logging.Filter):
    """Format a record's exception once, with credentials and the site's configured secrets redacted.

    For a logger Weave does not own: the tasks framework logs a failed task's exception, whose message may
    quote a token. The text is cached on the record (`exc_text`), which every handler's formatter prints
    instead of formatting the exception again; the record keeps its `exc_info` for error trackers.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info), secret_values())
        return True

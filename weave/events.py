"""One structured log line per job event, so a log search by id tells the same story as the admin.

log_event(logger, "claim", job="notification", id=42, owner="host:123:ab12", fence=3)
-> event=claim job=notification id=42 owner=host:123:ab12 fence=3
"""

import logging
from typing import Any

# Events that mean something went wrong for the job, logged at WARNING.
_WARN = {"lease_lost", "blocked", "renewal_failed", "failed", "crashed", "unknown"}


def _fmt(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


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
    """Log `event` for one job as `key=value` pairs: job type, id, owner, fence, reason, extras.

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
    line = " ".join(f"{k}={_fmt(v)}" for k, v in fields.items() if v is not None)
    logger.log(level, line, extra={"weave": fields})

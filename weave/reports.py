"""Worker reports: each django-q2 worker process writes what it runs with, every REPORT_EVERY seconds.

The dashboard and `weave_tune` read the reports to show the configuration as the workers run it, and
to tell a live worker (reported within REPORT_STALE seconds, by the database clock) from a dead one.
Only numbers and flags are reported: never a URL, a token or a path.
"""

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections

from weave.conf import KEYS, weave_settings

logger = logging.getLogger(__name__)

REPORT_EVERY = 15.0  # seconds between one process's reports
REPORT_STALE = timedelta(seconds=45)  # three missed reports: the process is gone or frozen
KEEP = timedelta(hours=1)  # reports older than this are deleted by the next report

_started: threading.Thread | None = None
_start_lock = threading.Lock()


def reported_config() -> dict[str, Any]:
    """The WEAVE settings this process reads, numbers and flags only (no text: it may hold a secret)."""
    config: dict[str, Any] = {}
    for name in KEYS:
        value = getattr(weave_settings, name)
        if value is None or isinstance(value, bool | int | float):
            config[name] = value
    return config


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def report_once(name: str, started_at: datetime | None = None) -> None:
    """Write (or refresh) this process's report, by the database clock, and drop long-gone ones."""
    from weave.models import WorkerReport
    from weave.telemetry import db_now

    now = db_now()
    WorkerReport.objects.update_or_create(
        name=name,
        defaults={"seen_at": now, "config": reported_config()},
        create_defaults={"started_at": started_at or now, "seen_at": now, "config": reported_config()},
    )
    WorkerReport.objects.filter(seen_at__lt=now - KEEP).delete()


def _loop(name: str) -> None:
    while True:
        try:
            report_once(name)
        except DatabaseError as exc:  # a report is telemetry: a failed one never stops the worker
            logger.warning("worker report failed: %s", exc)
        finally:
            close_old_connections()
        time.sleep(REPORT_EVERY)


def start_reporter(**_signal: Any) -> None:
    """Start this process's report thread once (a django-q2 `post_spawn` receiver)."""
    global _started
    with _start_lock:
        if _started is None:
            _started = threading.Thread(target=_loop, args=(process_name(),), name="weave-report", daemon=True)
            _started.start()


@dataclass(frozen=True)
class Workers:
    """The reports as the console reads them: live ones, and what they say they run with."""

    live: list[Any]  # WorkerReport rows seen within REPORT_STALE
    stale: list[Any]
    any_reported: bool

    def values(self, key: str) -> list[Any]:
        """The distinct values live workers report for `key` (several when workers disagree)."""
        return sorted({w.config.get(key) for w in self.live if key in w.config}, key=repr)


def workers(now: datetime) -> Workers:
    from weave.models import WorkerReport

    reports = list(WorkerReport.objects.order_by("name"))
    live = [w for w in reports if w.seen_at > now - REPORT_STALE]
    stale = [w for w in reports if w.seen_at <= now - REPORT_STALE]
    return Workers(live=live, stale=stale, any_reported=bool(reports))

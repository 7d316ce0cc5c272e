"""Worker reports: each django-q2 worker process writes what it runs with every REPORT_EVERY seconds.

The dashboard and `weave_tune` read them (numbers and flags only, never a secret) and tell a live worker
(reported within REPORT_STALE by the database clock) from a dead one. A report also carries the
process's database outages (`LINK`): written by the first report after the link is back, timed by the
database clock at the reconnection minus the length the worker measured on its monotonic clock.
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
from weave.sanitize import outside_text

logger = logging.getLogger(__name__)

REPORT_EVERY = 15.0  # seconds between one process's reports
RETRY_CUT_OFF = 1.0  # seconds between tries while the database link is down
ERROR_CHARS = 200  # of the first error seen, kept for the dashboard
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


class Link:
    """This process's database link: the outage under way (monotonic), and the last one that ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None  # monotonic time of the first failure of the outage under way
        self._error = ""
        self.outages = 0
        self.last: dict[str, Any] | None = None
        self.wake = threading.Event()  # set when an outage ends: report it now, not in REPORT_EVERY

    def cut_off(self, error: BaseException) -> None:
        """The link failed (a dropped connection, a server restarting): the first failure starts the clock."""
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                # The first line only (credentials redacted): drivers add hints on the following ones.
                lines = str(error).strip().splitlines() or [""]
                self._error = outside_text(f"{type(error).__name__}: {lines[0]}", limit=ERROR_CHARS)

    @property
    def down(self) -> bool:
        return self._since is not None

    def reconnected(self, db_time: datetime) -> None:
        """A query answered again at `db_time` (database clock): the outage under way, if any, is over."""
        with self._lock:
            if self._since is None:
                return
            seconds = max(0.0, time.monotonic() - self._since)
            self._since = None
            self.outages += 1
            self.last = {
                "began_at": (db_time - timedelta(seconds=seconds)).isoformat(),
                "ended_at": db_time.isoformat(),
                "seconds": round(seconds, 3),
                "error": self._error,
            }
        self.wake.set()

    def as_report(self) -> dict[str, Any]:
        with self._lock:
            return {"outages": self.outages, "last": dict(self.last) if self.last else None}


LINK = Link()


# Session limits this worker set itself (a statement cancelled by statement_timeout, a session ended for
# idling in a transaction): the link was cut for one session, the database was not away.
OWN_LIMITS = {"57014", "25P03"}


def note_failure(error: BaseException) -> None:
    """Called where a worker's query failed: an error that means the link is gone starts an outage."""
    from django.db import connection

    from weave.worker_db import is_cut_off

    if connection.vendor != "postgresql":  # SQLite has no link to lose ("database is locked" is a wait)
        return
    state = getattr(error.__cause__, "sqlstate", None) or getattr(error, "sqlstate", None) or ""
    if state not in OWN_LIMITS and is_cut_off(error):
        LINK.cut_off(error)


def note_answer() -> None:
    """Called where a worker's query succeeded: closes the outage under way with the database clock."""
    if not LINK.down:
        return
    from weave.telemetry import db_now

    try:
        LINK.reconnected(db_now())
    except DatabaseError as error:  # not back after all
        note_failure(error)


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def report_once(name: str, started_at: datetime | None = None) -> None:
    """Write (or refresh) this process's report, by the database clock, and drop long-gone ones."""
    from weave.models import WorkerReport
    from weave.telemetry import db_now

    now = db_now()
    LINK.reconnected(now)
    report = WorkerReport(
        name=name, started_at=started_at or now, seen_at=now, config=reported_config(), link=LINK.as_report()
    )
    # One INSERT ... ON CONFLICT, in autocommit, that keeps the first report's started_at. A read followed by
    # a write in one transaction (update_or_create) is refused at once on SQLite in its default deferred
    # mode when another process writes meanwhile ("database is locked": its busy timeout is not waited for
    # a read lock's upgrade), which every worker of a cluster starting together ran into.
    WorkerReport.objects.bulk_create(
        [report], update_conflicts=True, unique_fields=["name"], update_fields=["seen_at", "config", "link"]
    )
    WorkerReport.objects.filter(seen_at__lt=now - KEEP).delete()


def _loop(name: str) -> None:
    while True:
        LINK.wake.clear()
        try:
            report_once(name)
        except DatabaseError as exc:  # a report is telemetry: a failed one never stops the worker
            note_failure(exc)
            logger.warning("worker report failed: %s", exc)
        except Exception:
            # Nor does anything else end the reports: a thread that died here would leave this worker
            # shown as gone on the dashboard for the rest of its life. The next turn tries again.
            logger.exception("worker report failed")
        finally:
            close_old_connections()
        LINK.wake.wait(RETRY_CUT_OFF if LINK.down else REPORT_EVERY)


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

"""Worker reports: each django-q2 worker process writes its settings (numbers and flags, never a secret)
and its database outages every REPORT_EVERY seconds, for the dashboard and `weave_tune`."""

import logging
import os
import socket
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections, connection

from weave.conf import KEYS, weave_settings
from weave.sanitize import outside_text
from weave.telemetry import db_now
from weave.worker_db import is_cut_off

logger = logging.getLogger(__name__)

REPORT_EVERY = 15.0  # seconds between one process's reports
RETRY_CUT_OFF = 1.0  # seconds between tries while the database link is down
KEEP = timedelta(hours=1)  # reports older than this are deleted by the next report
# Session limits this worker set itself (statement_timeout, idle in transaction): one session was cut,
# the database was not away.
OWN_LIMITS = {"57014", "25P03"}


class Link:
    """This process's database link: the outage under way (monotonic), and the last one that ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._error = ""
        self.outages = 0
        self.last: dict[str, Any] | None = None
        self.wake = threading.Event()  # an outage ended: report it now

    @property
    def down(self) -> bool:
        return self._since is not None

    def cut_off(self, error: BaseException) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                line = (str(error).strip().splitlines() or [""])[0]  # drivers add hints on later lines
                self._error = outside_text(f"{type(error).__name__}: {line}", limit=200)

    def reconnected(self, db_time: datetime) -> None:
        """A query answered at `db_time` (database clock): the outage ends, dated back by its monotonic length."""
        with self._lock:
            if self._since is None:
                return
            seconds, self._since = max(0.0, time.monotonic() - self._since), None
            self.outages += 1
            began = (db_time - timedelta(seconds=seconds)).isoformat()
            self.last = {"began_at": began, "ended_at": db_time.isoformat(), "seconds": round(seconds, 3)}
            self.last["error"] = self._error
        self.wake.set()

    def as_report(self) -> dict[str, Any]:
        with self._lock:
            return {"outages": self.outages, "last": dict(self.last) if self.last else None}


LINK = Link()


def note_failure(error: BaseException) -> None:
    """A worker's query failed: an error that means the link is gone starts an outage (PostgreSQL only)."""
    state = getattr(error.__cause__, "sqlstate", None) or getattr(error, "sqlstate", None) or ""
    if connection.vendor == "postgresql" and state not in OWN_LIMITS and is_cut_off(error):
        LINK.cut_off(error)


def note_answer() -> None:
    """A worker's query answered: the outage under way, if any, ends by the database clock."""
    if LINK.down:
        try:
            LINK.reconnected(db_now())
        except DatabaseError as error:  # not back after all
            note_failure(error)


def report_once(name: str, started_at: datetime | None = None) -> None:
    """Write this process's report by the database clock, and drop long-gone ones.

    Each write is one statement, never a read then a write in one transaction: on SQLite's default
    deferred transactions that upgrade is refused at once ("database is locked") while another worker writes.
    """
    from weave.models import WorkerReport

    now = db_now()
    LINK.reconnected(now)
    config = {
        key: value for key in KEYS if isinstance(value := getattr(weave_settings, key), bool | int | float | None)
    }
    fields = {"seen_at": now, "config": config, "link": LINK.as_report()}
    if not WorkerReport.objects.filter(name=name).update(**fields):
        WorkerReport.objects.create(name=name, started_at=started_at or now, **fields)  # one reporter per name
    WorkerReport.objects.filter(seen_at__lt=now - KEEP).delete()


def _loop(name: str) -> None:
    while True:
        LINK.wake.clear()
        try:
            report_once(name)
        except DatabaseError as exc:
            note_failure(exc)
            logger.warning("worker report failed: %s", exc)
        except Exception:  # a dead report thread would show a live worker as gone: log and go on
            logger.exception("worker report failed")
        finally:
            close_old_connections()
        LINK.wake.wait(RETRY_CUT_OFF if LINK.down else REPORT_EVERY)


_started: threading.Thread | None = None
_start_lock = threading.Lock()


def start_reporter(**_signal: Any) -> None:
    """Start this process's report thread once (a django-q2 `post_spawn` receiver)."""
    global _started
    with _start_lock:
        if _started is None:
            name = f"{socket.gethostname()}:{os.getpid()}"
            _started = threading.Thread(target=_loop, args=(name,), name="weave-report", daemon=True)
            _started.start()

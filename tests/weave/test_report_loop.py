"""The report thread's loop (weave.reports): telemetry that nothing but the process's end stops."""

import logging

import pytest

from weave import reports


class _Stop(BaseException):
    """Ends the loop from inside the test: the loop goes on after any Exception, never after this."""


def test_report_loop__an_error_that_is_not_the_databases_is_logged_and_the_next_turn_reports_again(monkeypatch, caplog):
    calls = []

    def report_once(name):
        calls.append(name)
        if len(calls) == 1:
            raise ValueError("a value the report cannot encode")
        raise _Stop

    monkeypatch.setattr(reports, "LINK", reports.Link())
    monkeypatch.setattr(reports, "report_once", report_once)
    monkeypatch.setattr(reports, "REPORT_EVERY", 0.0)
    monkeypatch.setattr(reports, "close_old_connections", lambda: None)
    with caplog.at_level(logging.ERROR, logger=reports.logger.name), pytest.raises(_Stop):
        reports._loop("host-a:1")
    assert calls == ["host-a:1", "host-a:1"]
    assert "worker report failed" in caplog.text and "a value the report cannot encode" in caplog.text


SQLITE_SITE = """
SECRET_KEY = "reports"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_q", "weave"]
# What `startproject` writes: SQLite with no OPTIONS, so transactions are deferred.
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {db!r}}}}}
Q_CLUSTER = {{"name": "reports", "orm": "default", "timeout": 60, "retry": 120, "max_attempts": 3, "save_limit": -1,
             "broker_class": "weave.broker.DatabaseClockORM"}}
"""

REPORTER = """
import sys

import django

django.setup()
from django.db import DatabaseError

from weave.reports import report_once

failures = []
for _ in range({reports}):
    try:
        report_once(sys.argv[1])
    except DatabaseError as error:
        failures.append(repr(error))
print(len(failures), failures[:1])
"""


def test_report_once__workers_reporting_together_on_a_startproject_sqlite_file_are_never_refused(tmp_path):
    """Each worker process of a starting cluster reports at once; on SQLite's default (deferred) transactions a
    read-then-write report was refused with "database is locked" instead of waiting its turn."""
    import os
    import subprocess
    import sys

    from tools.processes import PROJECT_ROOT

    (tmp_path / "reports_site.py").write_text(SQLITE_SITE.format(db=str(tmp_path / "db.sqlite3")))
    (tmp_path / "reporter.py").write_text(REPORTER.format(reports=100))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "reports_site",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PROJECT_ROOT)]),
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("DATABASE_URL", None)
    migrate = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v0"], env=env, capture_output=True, text=True, timeout=120
    )
    assert migrate.returncode == 0, migrate.stderr
    workers = [
        subprocess.Popen(
            [sys.executable, str(tmp_path / "reporter.py"), f"host:{n}"], env=env, stdout=subprocess.PIPE, text=True
        )
        for n in range(4)
    ]
    outputs = [worker.communicate(timeout=120)[0].strip() for worker in workers]
    assert outputs == ["0 []"] * 4

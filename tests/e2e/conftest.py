"""Fixtures for end-to-end tests with real `qcluster` processes.

The children are separate processes, so they only see rows the test has committed: these tests use
transactional test databases (`django_db(transaction=True)`) and hand the test database to the
children through DATABASE_URL.
"""

import os
import shutil
import socket
from urllib.parse import quote

import pytest
from django.db import connection

from tools.processes import ProcessGroups


def database_url() -> str:
    """A DATABASE_URL naming the database this test runs on (the test database, not the configured one)."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = quote(s["USER"] or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    host = s["HOST"] or "127.0.0.1"
    return f"postgres://{auth}@{host}:{s['PORT'] or 5432}/{s['NAME']}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def groups(tmp_path):
    """Process groups for the test's children; every one is stopped when the test ends, pass or fail."""
    with ProcessGroups(log_dir=tmp_path / "logs") as started:
        yield started


@pytest.fixture
def worker_env() -> dict[str, str]:
    """Environment for a qcluster child: this test's database, short timings, quiet logs."""
    return {
        "DATABASE_URL": database_url(),
        "WEAVE_Q_WORKERS": "2",
        "WEAVE_PUSH_TIMEOUT": "3",
        "WEAVE_SUPPLIER_API_TIMEOUT": "3",
        "WEAVE_PUSH_BACKOFF_BASE": "0.5",
        "WEAVE_ONBOARDING_RETRY_BACKOFF": "0.2",
    }


def chromium_path() -> str | None:
    given = os.environ.get("WEAVE_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium for the browser tests: skipped without it, except under CI=true, where that fails."""
    path = chromium_path()
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true requires the browser test: install Debian's chromium (apt-get install chromium).")
        pytest.skip("no chromium binary (apt-get install chromium); required when CI=true")
    return path

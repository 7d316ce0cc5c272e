"""Worker database sessions: the limits reach worker processes' connections, and only theirs (issue 17)."""

import gc
import threading

import pytest
from django.core.checks import Warning as CheckWarning
from django.db import connections

from weave import checks, worker_db
from weave.worker_db import client_options, enter_worker_mode, is_cut_off, server_settings, worker_options


def test_worker_options__adds_client_and_server_limits_after_the_sites_own():
    merged = worker_options({"options": "-c search_path=app", "sslmode": "prefer", "connect_timeout": 60})
    assert merged["sslmode"] == "prefer"
    assert merged["connect_timeout"] == 5  # the WEAVE value wins
    assert merged["keepalives"] == 1 and merged["tcp_user_timeout"] == 10_000
    assert merged["options"].startswith("-c search_path=app ")
    assert "-c statement_timeout=10000" in merged["options"]
    assert "-c idle_in_transaction_session_timeout=10000" in merged["options"]


def test_server_settings__follow_weave_settings(settings):
    settings.WEAVE = {"WORKER_DB_STATEMENT_TIMEOUT": 2.5, "WORKER_DB_KEEPALIVES_COUNT": 4}
    assert server_settings()["statement_timeout"] == 2500
    assert server_settings()["tcp_keepalives_count"] == 4
    assert client_options()["keepalives_count"] == 4


def test_is_cut_off__connection_failures_yes_sql_refusals_no():
    from django.db import IntegrityError, OperationalError

    assert is_cut_off(OperationalError("server closed the connection unexpectedly"))
    assert not is_cut_off(IntegrityError("duplicate key"))


def _check(settings, monkeypatch, **weave):
    settings.WEAVE = weave
    monkeypatch.setattr(
        checks.settings, "DATABASES", {"default": {"ENGINE": "django.db.backends.postgresql"}}, raising=False
    )
    return checks.check_worker_db_limits()


def test_check__defaults_are_below_default_ttls(settings, monkeypatch):
    assert _check(settings, monkeypatch) == []


def test_check__warns_when_limits_are_off(settings, monkeypatch):
    (warning,) = _check(settings, monkeypatch, WORKER_DB_LIMITS=False)
    assert isinstance(warning, CheckWarning) and warning.id == "weave.W020"


def test_check__warns_when_a_limit_is_disabled(settings, monkeypatch):
    (warning,) = _check(settings, monkeypatch, WORKER_DB_STATEMENT_TIMEOUT=0)
    assert warning.id == "weave.W020" and "WORKER_DB_STATEMENT_TIMEOUT" in warning.msg


def test_check__warns_when_a_limit_is_not_below_the_shortest_ttl(settings, monkeypatch):
    warnings = _check(settings, monkeypatch, PUSH_LEASE_TTL=8.0, WORKER_DB_KEEPALIVES_IDLE=4)
    ids = {(w.id, w.msg.split("]")[0]) for w in warnings}
    # 10 s statement / idle / TCP user timeouts, and 4 + 2 x 3 s of keepalives, against an 8 s TTL.
    assert ids == {
        ("weave.W021", "WEAVE['WORKER_DB_STATEMENT_TIMEOUT'"),
        ("weave.W021", "WEAVE['WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT'"),
        ("weave.W021", "WEAVE['WORKER_DB_TCP_USER_TIMEOUT'"),
        ("weave.W021", "WEAVE['WORKER_DB_KEEPALIVES_IDLE + INTERVAL x COUNT'"),
        ("weave.W021", "WEAVE['WORKER_DB_STATEMENT_TIMEOUT + IDLE_IN_TRANSACTION_TIMEOUT'"),
    }
    assert "8 s" in warnings[0].msg


def test_check__names_where_the_shortest_ttl_is_set(settings, monkeypatch):
    warnings = _check(settings, monkeypatch, PUSH_LEASE_TTL=8.0)
    assert warnings and all("the shortest lease TTL, WEAVE['PUSH_LEASE_TTL'] (8 s)" in w.msg for w in warnings)


def test_check__a_job_types_own_ttl_counts_as_a_lease_ttl(settings, monkeypatch):
    """A job type declared with `ttl=` seconds, not a TTL key, is held to the same limits."""
    from dataclasses import replace

    from weave import jobs

    quick = replace(jobs.get("invoice"), name="quick", ttl=5.0, ttl_setting=None)
    monkeypatch.setattr(checks, "job_types", lambda: [*jobs.job_types(), quick])
    warnings = _check(settings, monkeypatch)
    assert warnings and all("the shortest lease TTL, the 'quick' job type's ttl (5 s)" in w.msg for w in warnings)
    assert {w.id for w in warnings} == {"weave.W021"}


def test_check__a_task_backends_lease_ttl_counts_as_a_lease_ttl(settings, monkeypatch):
    """`django.tasks` through Weave with a shorter `LEASE_TTL` in the backend's OPTIONS: held to the same limits."""
    settings.TASKS = {
        "default": {"BACKEND": "weave.tasks.WeaveBackend", "OPTIONS": {"LEASE_TTL": 6}},
        "other": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "OPTIONS": {"LEASE_TTL": 1}},
    }
    warnings = _check(settings, monkeypatch)
    where = "the shortest lease TTL, TASKS['default']['OPTIONS']['LEASE_TTL'] (6 s)"
    assert warnings and all(where in w.msg for w in warnings), [w.msg for w in warnings]
    assert {w.id for w in warnings} == {"weave.W021"}
    settings.TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend", "OPTIONS": {"LEASE_TTL": None}}}
    assert _check(settings, monkeypatch) == [], "None: the WEAVE LEASE_TTL, already counted"


def test_check__silent_without_postgresql(settings, monkeypatch):
    # The same settings warn with PostgreSQL configured (above); with only SQLite there is nothing to limit.
    settings.WEAVE = {"WORKER_DB_LIMITS": False}
    sqlite_only = {"default": {"ENGINE": "django.db.backends.sqlite3"}, "other": {"ENGINE": "x.sqlite3"}}
    monkeypatch.setattr(checks.settings, "DATABASES", sqlite_only, raising=False)
    assert checks.check_worker_db_limits() == []
    monkeypatch.setattr(
        checks.settings, "DATABASES", {**sqlite_only, "pg": {"ENGINE": "django.db.backends.postgresql"}}
    )
    assert [w.id for w in checks.check_worker_db_limits()] == ["weave.W020"]


@pytest.fixture
def no_reporter():
    """django-q2's `post_spawn` without the report thread, for a test that sends it in this process."""
    from django_q.signals import post_spawn

    from weave.reports import start_reporter

    assert post_spawn.disconnect(dispatch_uid="weave.reports.start_reporter")
    yield
    post_spawn.connect(start_reporter, dispatch_uid="weave.reports.start_reporter")


@pytest.fixture
def restore_worker_mode():
    saved = {alias: dict(d.get("OPTIONS") or {}) for alias, d in connections.settings.items()}
    yield
    for alias, options in saved.items():
        connections.settings[alias]["OPTIONS"] = options
    worker_db._worker_mode = False
    connections.close_all()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_worker_mode__new_connections_carry_the_limits_sync_tasks_do_not(restore_worker_mode, no_reporter, settings):
    # post_spawn below would also start the due-time watcher and the report thread in this test
    # process, where they would outlive the test (the watcher holding a session on the test database,
    # the reporter querying it from later tests): they are not what this test is about. The watcher is
    # off by its setting; the report thread's receiver is taken off for the test (`no_reporter`).
    settings.WEAVE = {**(getattr(settings, "WEAVE", None) or {}), "WAKE_WATCHER": False}
    before = worker_db.session_limits()
    assert before["server"]["statement_timeout"] == "0"  # the site's own sessions: untouched

    enter_worker_mode(task={"sync": True})  # a sync task runs in the enqueuing process: not a worker
    assert not worker_db.in_worker_mode()

    from django_q.signals import post_spawn

    post_spawn.send(sender="django_q", proc_name="test-worker")
    gc.unfreeze()  # post_spawn also froze this process's heap (weave.heap): not what this test is about
    assert worker_db.in_worker_mode()
    seen = {}

    def heartbeat_like_thread():
        seen.update(worker_db.session_limits())
        connections.close_all()

    thread = threading.Thread(target=heartbeat_like_thread)
    thread.start()
    thread.join(30)
    assert seen["server"]["statement_timeout"] == "10s"
    assert seen["server"]["idle_in_transaction_session_timeout"] == "10s"
    assert seen["server"]["tcp_user_timeout"] == "10000"  # shown in ms
    assert seen["server"]["tcp_keepalives_idle"] == "5"
    assert seen["client"]["keepalives_idle"] == "5" and seen["client"]["connect_timeout"] == "5"
    # This thread's connection was closed on entering worker mode and reopens with the limits too.
    assert worker_db.session_limits()["server"]["statement_timeout"] == "10s"


def weave_settings_valid() -> bool:
    from weave.conf import weave_settings

    return not weave_settings.problems()


def test_check__chaos_worker_limits_pass_for_its_short_ttl(settings, monkeypatch):
    from tests.demo.site_env import weave_settings_under
    from tools.chaos.config import ChaosConfig

    config = ChaosConfig()
    # The WEAVE dict a chaos worker gets: demo/settings.py itself reads the runner's environment.
    weave = weave_settings_under(config.worker_env())
    assert weave["PUSH_LEASE_TTL"] == weave["ONBOARDING_LEASE_TTL"] == config.lease_ttl
    assert any(name.startswith("WORKER_DB_") for name in weave)
    weave.pop("PUSH_BACKENDS", None)
    settings.WEAVE = weave
    assert weave_settings_valid()
    assert _check(settings, monkeypatch, **weave) == []

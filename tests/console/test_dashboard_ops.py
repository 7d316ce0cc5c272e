"""The dashboard's operations panels and findings: database outages, retention, wake-ups by polling."""

import re
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils.dateparse import parse_datetime

from tests.weave.test_retention import finished_notification
from weave import reports, retention
from weave.models import PurgeState, WatcherProbe, WorkerReport
from weave.telemetry import db_now

pytestmark = pytest.mark.django_db
URL = "/admin/weave/dashboard/"


def verdict(page: str) -> str:
    found = re.search(r'<div id="weave-verdict".*?</div>', page, re.S)
    assert found, page
    return found.group(0)


def section(page: str, key: str) -> str:
    found = re.search(rf'<section id="weave-{key}".*?</section>', page, re.S)
    assert found, f"no {key} section"
    return found.group(0)


@pytest.fixture
def link(monkeypatch):
    fresh = reports.Link()
    monkeypatch.setattr(reports, "LINK", fresh)
    return fresh


@pytest.mark.postgres
def test_an_outage_a_worker_saw__is_reported_with_database_clock_times_and_degrades_the_verdict(admin_client, link):
    reports.report_once("host-a:1")  # a worker reporting before the server went away
    error = OperationalError("server closed the connection unexpectedly\n\tThis probably means the server terminated")
    reports.note_failure(error)
    reports.note_failure(OperationalError("connection refused"))  # later failures do not restart the outage
    assert link.down
    reports.report_once("host-a:1")  # the first report after it answers: the outage is written

    row = WorkerReport.objects.get(name="host-a:1")
    last = row.link["last"]
    assert row.link["outages"] == 1 and not link.down
    # The end is the database clock when the report's query answered (the same reading as seen_at).
    assert parse_datetime(last["ended_at"]) == row.seen_at
    began = row.seen_at - timedelta(seconds=last["seconds"])
    assert abs(parse_datetime(last["began_at"]) - began) <= timedelta(milliseconds=1)  # SQLite keeps ms
    assert last["error"] == "OperationalError: server closed the connection unexpectedly"

    page = admin_client.get(URL).content.decode()
    said = verdict(page)
    assert "Degraded" in said and "Database outage: 1 worker process lost the database" in said
    assert "server closed the connection unexpectedly" in said and "This probably means" not in said
    assert "host-a:1" in section(page, "outages")


def test_on_sqlite_a_locked_database__is_not_an_outage(link):
    if reports_vendor() != "sqlite":
        pytest.skip("the SQLite pass checks this")
    reports.note_failure(OperationalError("database is locked"))
    assert not link.down


def reports_vendor() -> str:
    from django.db import connection

    return connection.vendor


@pytest.mark.postgres
def test_a_statement_cancelled_by_the_workers_own_timeout__is_not_an_outage(link):
    import psycopg

    error = OperationalError("canceling statement due to statement timeout")
    error.__cause__ = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    reports.note_failure(error)
    assert not link.down


def test_overlapping_outages_of_several_workers__are_one_event_and_an_old_one_only_history(admin_client):
    now = db_now()

    def saw(name: str, began_ago: float, ended_ago: float) -> None:
        last = {
            "began_at": (now - timedelta(seconds=began_ago)).isoformat(),
            "ended_at": (now - timedelta(seconds=ended_ago)).isoformat(),
            "seconds": began_ago - ended_ago,
            "error": "OperationalError: the database system is shutting down",
        }
        WorkerReport.objects.create(
            name=name, started_at=now, seen_at=now, config={}, link={"outages": 1, "last": last}
        )

    saw("host-a:1", 64, 60)
    saw("host-b:2", 63, 59)
    saw("host-c:3", 3600, 3590)  # an hour ago: in the panel, not in the verdict
    page = admin_client.get(URL).content.decode()
    said = verdict(page)
    assert said.count("Database outage:") == 1 and "2 worker processes lost the database" in said
    assert "(5 s, ended 59 s ago, database clock)" in said
    assert "host-c:3" in section(page, "outages")


def test_retention_backlog_with_no_purge_run__degrades_the_verdict_until_a_purge_catches_up(admin_client):
    finished_notification(40, attempts=2)
    page = admin_client.get(URL).content.decode()
    said = verdict(page)
    assert "Retention purge behind" in said and "notifications 1" in said and "attempts 2" in said
    assert "no purge has finished yet" in said
    panel = section(page, "retention")
    assert "30 days" in panel and "not running" in panel

    retention.purge()
    page = admin_client.get(URL).content.decode()
    assert "Retention purge behind" not in verdict(page)
    panel = section(page, "retention")
    assert "Every purge has deleted 3 rows in all" in panel and "finished; deleted 3 rows" in panel


def test_a_backlog_the_schedule_keeps_up_with__is_not_a_finding(admin_client):
    finished_notification(40)
    PurgeState.objects.create(name=retention.JOB, last_finished_at=db_now(), last_outcome="budget spent")
    assert "Retention purge behind" not in verdict(admin_client.get(URL).content.decode())


def test_one_watcher_polling__is_said_in_the_singular(admin_client):
    WatcherProbe.objects.create(
        process="host-b:2", mode="poll", reason="a probe NOTIFY did not arrive", probed_at=db_now()
    )
    said = verdict(admin_client.get(URL).content.decode())
    assert "Wake-ups by polling: 1 of 1 worker watcher polls the next due time" in said


def test_watchers_polling_instead_of_listening__are_a_finding_with_the_reason(admin_client):
    WatcherProbe.objects.create(process="host-a:1", mode="listen", reason="notifications arrive", probed_at=db_now())
    WatcherProbe.objects.create(
        process="host-b:2",
        mode="poll",
        reason="a probe NOTIFY did not arrive (a transaction pooler?)",
        probed_at=db_now(),
    )
    page = admin_client.get(URL).content.decode()
    said = verdict(page)
    assert "Wake-ups by polling: 1 of 2 worker watchers poll" in said and "transaction pooler" in said
    assert "WAKE_LISTEN_DB" in said
    assert "host-b:2" in section(page, "wake")


def test_no_outage_no_backlog_all_listening__add_nothing_to_the_verdict(admin_client):
    WatcherProbe.objects.create(process="host-a:1", mode="listen", reason="notifications arrive", probed_at=db_now())
    page = admin_client.get(URL).content.decode()
    assert "Healthy." in verdict(page)
    assert "No watcher polls." in section(page, "wake")

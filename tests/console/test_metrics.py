"""The Prometheus endpoint: bearer token or staff session, figures read from the database, exact counters."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families

from notifications import console as notification_console
from onboarding import console as onboarding_console
from onboarding.models import RunAttempt
from tests.console.conftest import add_attempts
from tests.factories import NotificationFactory, OnboardingRunFactory
from weave.telemetry import db_now

pytestmark = pytest.mark.django_db
URL = "/metrics"


@pytest.fixture(autouse=True)
def _fresh_counters():
    # The running counters live for the process; each test starts from an empty database.
    for counts in (notification_console._attempts, notification_console._latency, onboarding_console._attempts):
        counts.reset()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_without_token__anonymous_and_non_staff_refused_staff_allowed(client):
    assert client.get(URL).status_code == 403
    User.objects.create_user("plain", password="pw")
    client.login(username="plain", password="pw")
    assert client.get(URL).status_code == 403
    User.objects.create_user("ops", password="pw", is_staff=True)
    client.login(username="ops", password="pw")
    response = client.get(URL)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")


def test_with_token__only_the_bearer_may_read_even_staff_needs_it(client, admin_client, settings):
    settings.WEAVE = {**settings.WEAVE, "METRICS_TOKEN": "s3cret"}
    assert client.get(URL).status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Basic s3cret").status_code == 401
    assert admin_client.get(URL).status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_figures_come_from_the_database(admin_client):
    add_attempts(3, latency_ms=80)
    add_attempts(2, outcome="lease_lost", latency_ms=3000)
    NotificationFactory(next_attempt_at=db_now() - timedelta(seconds=90))
    run = OnboardingRunFactory()
    now = db_now()
    RunAttempt.objects.create(
        run=run,
        fence=1,
        owner="w",
        started_at=now - timedelta(minutes=5),
        ended_at=now - timedelta(minutes=4),
        outcome="blocked",
        reason="lost",
    )
    got = samples(admin_client.get(URL).content.decode())
    assert got[("weave_notifications", (("status", "delivered"),))] == 1
    assert got[("weave_due_backlog", ())] == 1
    assert 85 <= got[("weave_oldest_due_age_seconds", ())] <= 600
    assert got[("weave_delivery_attempts_total", (("outcome", "delivered"),))] == 3
    assert got[("weave_delivery_attempts_total", (("outcome", "lease_lost"),))] == 2
    assert got[("weave_lease_refusals_total", (("job", "notification"),))] == 2
    assert got[("weave_lease_refusals_total", (("job", "onboarding"),))] == 1
    assert got[("weave_run_attempts_total", (("outcome", "blocked"),))] == 1
    assert got[("weave_onboarding_runs", (("status", "pending"),))] == 1
    assert got[("weave_leases", (("job", "notification"), ("state", "live")))] == 0
    assert got[("weave_provider_latency_seconds_bucket", (("backend", "default"), ("le", "0.1")))] == 3
    assert got[("weave_provider_latency_seconds_bucket", (("backend", "default"), ("le", "+Inf")))] == 5
    assert got[("weave_provider_latency_seconds_count", (("backend", "default"),))] == 5
    assert got[("weave_provider_latency_seconds_sum", (("backend", "default"),))] == pytest.approx(6.24)
    # The process's own counter: each scrape that answers counts itself once (earlier tests' scrapes too).
    scrapes = ("weave_metrics_scrapes_total", (("result", "ok"),))
    assert got[scrapes] >= 1
    assert samples(admin_client.get(URL).content.decode())[scrapes] == got[scrapes] + 1


def test_counters_count_a_new_row_at_once_and_each_row_once_when_it_is_kept(admin_client, monkeypatch):
    from weave.models import MetricCheckpoint

    add_attempts(4)
    key = ("weave_delivery_attempts_total", (("outcome", "delivered"),))
    assert samples(admin_client.get(URL).content.decode())[key] == 4
    add_attempts(2, ago=5)  # younger than the lag: counted afresh at each scrape, not kept yet
    assert samples(admin_client.get(URL).content.decode())[key] == 6
    assert samples(admin_client.get(URL).content.decode())[key] == 6
    assert MetricCheckpoint.objects.get(name="notifications.attempts").totals == [[["delivered"], 4]]
    monkeypatch.setattr("weave.metrics.LAG", timedelta(0))  # stand-in for time passing by the lag
    assert samples(admin_client.get(URL).content.decode())[key] == 6  # now kept: still counted once
    assert samples(admin_client.get(URL).content.decode())[key] == 6  # the next scrape adds nothing twice
    assert MetricCheckpoint.objects.get(name="notifications.attempts").totals == [[["delivered"], 6]]


def test_counters__a_new_process_starts_from_the_stored_checkpoint_and_counts_only_what_is_new(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from weave.models import MetricCheckpoint

    key = ("weave_delivery_attempts_total", (("outcome", "delivered"),))
    add_attempts(3)
    assert samples(admin_client.get(URL).content.decode())[key] == 3
    assert MetricCheckpoint.objects.filter(name="notifications.attempts").exists()
    # Rows behind the checkpoint are never counted again: a new process that counted everything would say 4.
    stored = MetricCheckpoint.objects.get(name="notifications.attempts")
    MetricCheckpoint.objects.filter(pk=stored.pk).update(totals=[[["delivered"], 2]])
    for counts in (notification_console._attempts, notification_console._latency):
        counts.reset()  # a new process
    with CaptureQueriesContext(connection) as queries:
        text = admin_client.get(URL).content.decode()
    assert samples(text)[key] == 2  # the stored totals, not a recount of every stored attempt
    by_outcome = [q["sql"] for q in queries.captured_queries if '"outcome" AS "outcome", COUNT(' in q["sql"]]
    attempts = [sql for sql in by_outcome if 'FROM "weave_notifications_deliveryattempt"' in sql]
    assert attempts and all('"finished_at" >' in sql for sql in attempts)  # a delta after the checkpoint


def test_metric_names_are_unique_in_the_exposition(admin_client):
    text = admin_client.get(URL).content.decode()
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types))


@pytest.mark.postgres
def test_large_table__finished_states_from_planner_statistics_pending_exact(admin_client, monkeypatch):
    from django.db import connection

    from notifications.models import Notification

    for _ in range(40):
        NotificationFactory(status="delivered")
    for _ in range(10):
        NotificationFactory()  # pending
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Notification._meta.db_table}")
    monkeypatch.setattr("weave.telemetry.EXACT_BELOW", 0)  # stand-in for a table of millions
    counts, estimated = notification_console.status_counts()
    assert estimated
    assert counts["pending"] == 10  # counted exactly, whatever the statistics say
    assert counts["delivered"] == 40  # the planner's estimate: exact here, as ANALYZE read every row
    monkeypatch.setattr("weave.telemetry.EXACT_BELOW", 10**9)
    counts, estimated = notification_console.status_counts()
    assert not estimated
    assert counts == {**dict.fromkeys(Notification.Status.values, 0), "pending": 10, "delivered": 40}


def test_latency__a_receipt_that_names_its_backend_is_grouped_by_it_without_its_notification(admin_client, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from notifications.models import DeliveryAttempt

    apns = add_attempts(2, latency_ms=80)
    DeliveryAttempt.objects.filter(pk__in=[a.pk for a in apns]).update(backend="apns")
    with CaptureQueriesContext(connection) as queries:
        got = samples(admin_client.get(URL).content.decode())
    assert got[("weave_provider_latency_seconds_count", (("backend", "apns"),))] == 2
    latency = [q["sql"] for q in queries.captured_queries if "latency_ms" in q["sql"] and "SUM(" in q["sql"]]
    assert latency and all("weave_notifications_notification" not in sql for sql in latency)
    add_attempts(1, latency_ms=80, ago=5)  # written before receipts named their backend: read through its notification
    monkeypatch.setattr("weave.metrics.LAG", timedelta(0))  # stand-in for time passing by the lag
    got = samples(admin_client.get(URL).content.decode())
    assert got[("weave_provider_latency_seconds_count", (("backend", "default"),))] == 1


def test_latency_is_grouped_by_the_notifications_backend_alias(admin_client):
    from notifications.models import DeliveryAttempt, Notification

    add_attempts(3, latency_ms=80)
    fcm = add_attempts(4, latency_ms=400)
    Notification.objects.filter(pk=fcm[0].notification_id).update(backend="fcm")
    assert DeliveryAttempt.objects.filter(notification__backend="fcm").count() == 4
    got = samples(admin_client.get(URL).content.decode())
    assert got[("weave_provider_latency_seconds_count", (("backend", "default"),))] == 3
    assert got[("weave_provider_latency_seconds_count", (("backend", "fcm"),))] == 4
    assert got[("weave_provider_latency_seconds_bucket", (("backend", "fcm"), ("le", "0.25")))] == 0
    page = admin_client.get("/admin/weave/dashboard/").content.decode()
    assert "Provider latency, backend fcm" in page and "backend fcm" in page

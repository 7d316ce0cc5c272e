"""The Weave dashboard in the admin: staff only, linked from the index, charts with data, TTL advice."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from notifications.models import BreakerOpening, Notification
from onboarding.models import RunAttempt
from tests.console.conftest import add_attempts
from tests.factories import NotificationFactory, OnboardingRunFactory
from weave.telemetry import db_now

pytestmark = pytest.mark.django_db
URL = "/admin/weave/dashboard/"


def test_url_is_the_admin_one_and_the_index_links_to_it(admin_client):
    assert reverse("admin:weave_dashboard_changelist") == URL
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{URL}"' in index


def test_anonymous_and_non_staff_are_sent_to_the_login(client):
    assert client.get(URL).status_code == 302
    User.objects.create_user("plain", password="pw", is_staff=False)
    client.login(username="plain", password="pw")
    response = client.get(URL)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_any_staff_member_may_read_it_without_model_permissions(client):
    User.objects.create_user("ops", password="pw", is_staff=True)
    client.login(username="ops", password="pw")
    assert client.get(URL).status_code == 200


def test_empty_database__renders_with_empty_charts(admin_client):
    page = admin_client.get(URL).content.decode()
    assert "no data yet" in page
    assert 'data-points="0"' in page
    # Auto-reload is off unless asked for (a reload would move a keyboard user), and offered as a link.
    assert 'data-weave-refresh="0"' in page and "?refresh=10" in page and 'http-equiv="refresh"' not in page


def test_with_traffic__charts_have_points_and_panels_tell_the_story(admin_client):
    add_attempts(30, latency_ms=150)
    add_attempts(5, outcome="temporary", latency_ms=900)
    NotificationFactory(next_attempt_at=db_now() - timedelta(minutes=3))  # due, waiting 3 min
    held = NotificationFactory()
    Notification.objects.claim(held.pk, owner="worker-x", ttl=-1)  # expired at once by the database clock
    BreakerOpening.objects.create(opened_at=db_now(), owner="push:h:1", reason="Circuit breaker opened: HTTP 401")
    run = OnboardingRunFactory()
    RunAttempt.objects.create(
        run=run,
        fence=1,
        owner="w1",
        started_at=db_now(),
        ended_at=db_now(),
        outcome="blocked",
        reason="Lease lost: w2 holds the run at fence 2",
    )
    page = admin_client.get(URL).content.decode()
    points = [int(n) for n in re.findall(r'data-points="(\d+)"', page)]
    assert len(points) >= 2 and all(n > 0 for n in points), points
    assert "Provider latency, backend default" in page
    assert "Circuit breaker opened: HTTP 401" in page
    assert "Lease lost: w2 holds the run at fence 2" in page
    assert re.search(r"3 min \d+ s", page)  # age of the oldest due row
    # Leases: the claimed row's lease expired by the database clock.
    # Each count links to the rows it counts; the expired lease is named with its holder and fence.
    assert re.search(r'<td[^>]*>notification</td><td[^>]*>0</td><td[^>]*><a href="[^"]*lease=expired">1</a></td>', page)
    assert f"notification #{held.pk}</a>" in page and "worker-x" in page
    # TTL advice: 35 push samples, enough for a recommendation beside the configured value.
    assert "PUSH_LEASE_TTL = 30 s" in page and "ok" in page


def test_slow_traffic__ttl_verdict_says_too_short(admin_client, settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_LEASE_TTL": 5.0}
    add_attempts(40, latency_ms=8000)
    page = admin_client.get(URL).content.decode()
    assert "TOO SHORT" in page


def test_refresh_can_be_turned_off(admin_client):
    page = admin_client.get(URL + "?refresh=0").content.decode()
    assert 'http-equiv="refresh"' not in page


def test_failed_runs_are_counted_by_the_step_they_failed_at(admin_client):
    from onboarding.models import OnboardingRun

    run = OnboardingRunFactory()
    OnboardingRun.objects.filter(pk=run.pk).update(status="failed", phase="set_payment_terms")
    page = admin_client.get(URL).content.decode()
    assert re.search(
        r"<td[^>]*>failed</td><td[^>]*>failed at register_bank_account</td>"
        r"<td[^>]*><a href=\"[^\"]*failed_step=register_bank_account[^\"]*\">1</a></td>",
        page,
    )

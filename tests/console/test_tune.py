"""`manage.py weave_tune` and the system check weave.W030, both fed by recent attempts in the database."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from onboarding.models import RunAttempt, StepReceipt
from tests.console.conftest import add_attempts
from tests.factories import OnboardingRunFactory
from weave.checks import check_ttl_fits_traffic
from weave.telemetry import db_now

pytestmark = pytest.mark.django_db


def tune() -> str:
    out = StringIO()
    call_command("weave_tune", stdout=out)
    return out.getvalue()


def test_no_traffic__says_so():
    assert "No latency recorded" in tune()
    assert check_ttl_fits_traffic(databases=["default"]) == []


def test_fast_traffic__recommendation_with_its_data_and_no_warning():
    add_attempts(50, latency_ms=200)
    text = tune()
    assert "backend default" in text and "50" in text and "0.200" in text
    assert "PUSH_LEASE_TTL: 30 s covers the 2 s needed." in text
    assert check_ttl_fits_traffic(databases=["default"]) == []


def test_slow_traffic__warns_in_the_command_and_the_check(settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_LEASE_TTL": 6.0}
    add_attempts(50, latency_ms=7000)
    assert "PUSH_LEASE_TTL: raise from 6 s to at least 13 s." in tune()  # 1.5 * (7 + 1.4) = 12.6
    warnings = check_ttl_fits_traffic(databases=["default"])
    assert [w.id for w in warnings] == ["weave.W030"]
    assert "PUSH_LEASE_TTL" in warnings[0].msg and "13 s" in warnings[0].msg


def test_check_stays_quiet_when_not_asked_for_the_database():
    add_attempts(50, latency_ms=60000)
    assert check_ttl_fits_traffic(databases=None) == []


def test_onboarding__per_step_durations_from_receipts(settings):
    settings.WEAVE = {**settings.WEAVE, "ONBOARDING_LEASE_TTL": 3.0}
    now = db_now()
    for _ in range(25):
        run = OnboardingRunFactory()
        start = now - timedelta(minutes=10)
        RunAttempt.objects.create(run=run, fence=1, owner="w", started_at=start, outcome="running")
        StepReceipt.objects.create(
            run=run, step="verify_tax_id", fence=1, owner="w", completed_at=start + timedelta(seconds=1)
        )
        StepReceipt.objects.create(
            run=run, step="screen_sanctions", fence=1, owner="w", completed_at=start + timedelta(seconds=5)
        )
    text = tune()
    assert "step verify_tax_id" in text and "step screen_sanctions" in text
    # 4 s steps: 1.5 * (4 + 1) = 7.5 -> 8 s; 1 s steps: 1.5 * (1 + 1) = 3 s.
    assert "ONBOARDING_LEASE_TTL: raise from 3 s to at least 8 s." in text


def test_the_live_workers_whose_ttls_are_shown_are_counted_in_a_proper_singular_or_plural():
    from weave.reports import report_once

    add_attempts(50, latency_ms=200)
    report_once("host-a:1")
    assert "Configured TTLs as 1 live worker runs them: " in tune()
    report_once("host-b:2")
    assert "Configured TTLs as 2 live workers run them: " in tune()

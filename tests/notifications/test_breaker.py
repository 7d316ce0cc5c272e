"""The circuit breaker stops a batch on systematic provider failure without burning unstarted rows' attempts."""

from datetime import timedelta

import pytest

from notifications.backends import Outcome, SendResult
from notifications.delivery import CircuitBreaker, deliver_batch
from notifications.models import Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db


def test_breaker__a_run_of_5xx_stops_the_batch_and_holds_the_rest_back(push_settings, fake, clock, settings):
    settings.WEAVE = {**push_settings, "PUSH_BREAKER_THRESHOLD": 5, "PUSH_BREAKER_COOLDOWN": 30}
    NotificationFactory.create_batch(20, next_attempt_at=clock.current)
    fake.configure(force_status=502)
    report = deliver_batch(clock=clock, concurrency=1)
    assert report.breaker.startswith("Circuit breaker opened after 5 provider failures in a row")
    assert (report.sent, report.temporary, report.released) == (5, 5, 15)
    assert fake.stats()["requests"] == 5
    held_back = Notification.objects.filter(attempts=0)
    assert held_back.count() == 15
    assert set(held_back.values_list("status", "owner", "next_attempt_at")) == {
        ("pending", None, clock.current + timedelta(seconds=30))
    }
    assert all("without using an attempt" in e for e in held_back.values_list("last_error", flat=True))


def test_breaker__bad_credentials_stop_the_batch_after_one_request(push_settings, fake, clock):
    NotificationFactory.create_batch(10, next_attempt_at=clock.current)
    fake.configure(token="the-real-token")
    report = deliver_batch(clock=clock, concurrency=1)
    assert fake.stats()["requests"] == 1
    assert (report.sent, report.released) == (1, 9)
    assert "refused our credentials (HTTP 401)" in report.breaker
    assert Notification.objects.filter(attempts=0, owner__isnull=True).count() == 9


def test_breaker__a_good_answer_breaks_the_run():
    breaker = CircuitBreaker(threshold=3)
    failure = SendResult(outcome=Outcome.TEMPORARY, http_status=503, reason="HTTP 503", systemic=True)
    for result in (failure, failure, SendResult(outcome=Outcome.DELIVERED), failure, failure):
        breaker.record(result)
    assert breaker.reason == ""
    # A timeout says nothing about the provider's health either way: it neither counts nor resets.
    breaker.record(SendResult(outcome=Outcome.UNKNOWN))
    assert breaker.reason == ""
    breaker.record(failure)
    assert breaker.reason == "Circuit breaker opened after 3 provider failures in a row (last: HTTP 503)"

"""Every outcome class, against the fake provider over real HTTP, on the fake clock."""

import socket
from datetime import timedelta

import pytest

from notifications.delivery import deliver_batch
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db


def deliver_one(clock, **options):
    """Create one due row, deliver it and return (row, its single attempt, the report)."""
    notification = NotificationFactory(next_attempt_at=clock.current)
    report = deliver_batch(clock=clock, **options)
    notification.refresh_from_db()
    (attempt,) = DeliveryAttempt.objects.filter(notification=notification)
    return notification, attempt, report


def assert_retry(notification, attempt, clock, *, outcome, low, high, reason):
    assert notification.status == Notification.Status.PENDING
    assert notification.attempts == 1
    assert attempt.outcome == outcome
    assert (
        clock.current + timedelta(seconds=low)
        <= notification.next_attempt_at
        <= clock.current + timedelta(seconds=high)
    )
    assert reason in attempt.reason
    assert reason in notification.last_error
    assert "Attempt 1 of 3" in notification.last_error
    # Released: another worker can take the row as soon as it is due.
    assert notification.owner is None and notification.lease_expires_at is None


def test_200__delivered(push_settings, fake, clock):
    notification, attempt, report = deliver_one(clock)
    assert notification.status == Notification.Status.DELIVERED
    assert notification.delivered_at == clock.current
    assert notification.provider_message_id.startswith("msg-")
    assert notification.last_error == ""
    assert (attempt.outcome, attempt.http_status, attempt.reason) == ("delivered", 200, "")
    assert attempt.finished_at == clock.current
    assert attempt.fence == notification.fence == 1
    assert notification.owner is None
    assert fake.stats()["delivered_keys"] == [str(notification.idempotency_key)]
    assert report.delivered == 1


def test_200_with_malformed_body__still_delivered_with_the_problem_noted(push_settings, fake, clock):
    fake.configure(malformed=True)
    notification, attempt, _ = deliver_one(clock)
    assert notification.status == Notification.Status.DELIVERED
    assert attempt.outcome == "delivered"
    assert "not valid JSON" in attempt.reason
    assert "not valid JSON" in notification.last_error
    assert notification.next_attempt_at == clock.current  # untouched


def test_429_with_retry_after_seconds__due_when_the_provider_asked(push_settings, fake, clock):
    fake.configure(rate_429=1.0, retry_after="7")
    notification, attempt, _ = deliver_one(clock)
    assert_retry(notification, attempt, clock, outcome="temporary", low=7, high=7, reason="HTTP 429, Retry-After 7 s")
    assert attempt.http_status == 429


def test_429_with_retry_after_http_date__due_when_the_provider_asked(push_settings, fake, clock):
    fake.configure(rate_429=1.0, retry_after="date:120")
    notification, attempt, _ = deliver_one(clock)
    # An HTTP-date has one-second resolution.
    assert_retry(notification, attempt, clock, outcome="temporary", low=119, high=121, reason="HTTP 429, Retry-After")


@pytest.mark.parametrize("status", [500, 503])
def test_5xx__temporary_with_backoff(push_settings, fake, clock, status):
    fake.configure(force_status=status)
    notification, attempt, _ = deliver_one(clock)
    # First retry: base 2 s with equal jitter, so between 1 and 2 s on the database clock.
    assert_retry(notification, attempt, clock, outcome="temporary", low=1, high=2, reason=f"failed (HTTP {status})")
    assert attempt.http_status == status


def test_408__temporary(push_settings, fake, clock):
    fake.configure(force_status=408)
    notification, attempt, _ = deliver_one(clock)
    assert_retry(notification, attempt, clock, outcome="temporary", low=1, high=2, reason="timed out reading")


def test_400__permanent(push_settings, fake, clock):
    fake.configure(force_status=400)
    notification, attempt, _ = deliver_one(clock)
    assert notification.status == Notification.Status.FAILED
    assert (attempt.outcome, attempt.http_status) == ("permanent", 400)
    assert "rejected the notification (HTTP 400)" in attempt.reason
    assert notification.last_error.startswith("Failed permanently on attempt 1")
    assert notification.next_attempt_at == clock.current  # never due again: it is failed


@pytest.mark.parametrize("status", [404, 410])
def test_404_410__permanent_invalid_token(push_settings, fake, clock, status):
    fake.configure(force_status=status)
    notification, attempt, _ = deliver_one(clock)
    assert notification.status == Notification.Status.FAILED
    assert attempt.outcome == "permanent"
    assert f"device token is invalid or no longer registered (HTTP {status})" in notification.last_error
    assert notification.next_attempt_at == clock.current


def test_401__temporary_and_opens_the_breaker(push_settings, fake, clock):
    fake.configure(token="another-token")
    notification, attempt, report = deliver_one(clock)
    assert_retry(notification, attempt, clock, outcome="temporary", low=1, high=2, reason="refused our credentials")
    assert attempt.http_status == 401
    assert "PUSH_TOKEN" in attempt.reason
    assert report.breaker.startswith("Circuit breaker opened")


def test_timeout_after_delivery__unknown_and_retried_with_the_same_key(push_settings, fake, clock, settings):
    settings.WEAVE = {**push_settings, "PUSH_TIMEOUT": 0.5}
    fake.configure(rate_hang=1.0, hang_seconds=2.0)
    notification, attempt, _ = deliver_one(clock)
    assert_retry(notification, attempt, clock, outcome="unknown", low=1, high=2, reason="may have delivered it")
    assert "No response within 0.5 s" in attempt.reason
    assert attempt.http_status is None
    # The provider did deliver it; the retry carries the same key, so it is not delivered twice.
    fake.configure(rate_hang=0.0)
    clock.advance(2)
    deliver_batch(clock=clock)
    notification.refresh_from_db()
    assert notification.status == Notification.Status.DELIVERED
    stats = fake.stats()
    assert stats["per_key"] == {str(notification.idempotency_key): 2}
    assert stats["unique_deliveries"] == 1


def test_connection_dropped_after_sending__unknown(push_settings, fake, clock):
    fake.configure(rate_drop=1.0)
    notification, attempt, _ = deliver_one(clock)
    assert_retry(notification, attempt, clock, outcome="unknown", low=1, high=2, reason="connection dropped")


def test_connection_refused__temporary_nothing_sent(push_settings, clock, settings):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.WEAVE = {**push_settings, "PUSH_URL": f"http://127.0.0.1:{port}/push"}
    notification, attempt, _ = deliver_one(clock)
    assert_retry(notification, attempt, clock, outcome="temporary", low=1, high=2, reason="nothing was sent")
    assert "Could not reach the provider" in notification.last_error


def test_out_of_attempts__failed_with_the_whole_story(push_settings, fake, clock):
    fake.configure(force_status=503)
    notification = NotificationFactory(next_attempt_at=clock.current)
    for _ in range(3):
        deliver_batch(clock=clock)
        clock.advance(3600)
    notification.refresh_from_db()
    assert notification.status == Notification.Status.FAILED
    assert notification.attempts == 3
    lines = notification.last_error.splitlines()
    assert lines[0] == "Gave up after 3 attempts (PUSH_MAX_ATTEMPTS=3)."
    assert [line[:14] for line in lines[1:]] == ["1. temporary: ", "2. temporary: ", "3. temporary: "]
    assert all("HTTP 503" in line for line in lines[1:])
    assert (
        list(DeliveryAttempt.objects.filter(notification=notification).values_list("outcome", flat=True))
        == ["temporary"] * 3
    )

"""Hostile providers (issue 10, items 1-3), against the worker over real HTTP with the fake's fault modes.

Each case failed before the capped exchange, the sanitized reasons and the row-by-row fallback:
NUL bytes jammed a row on PostgreSQL, trickled answers outlived the timeout, huge bodies were read
whole, a redirect failed the message permanently, echoed credentials landed in the admin, and a 503's
Retry-After was ignored.
"""

import logging
import time
from datetime import timedelta

import pytest
from django.db import DataError

from notifications.delivery import completer, deliver_batch
from notifications.explain import explain_notification
from notifications.models import DeliveryAttempt, Notification
from tests.conftest import TOKEN
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db


def deliver_one(clock, **options):
    notification = NotificationFactory(next_attempt_at=clock.current)
    report = deliver_batch(clock=clock, **options)
    notification.refresh_from_db()
    (attempt,) = DeliveryAttempt.objects.filter(notification=notification)
    return notification, attempt, report


def wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def assert_one_safe_line(text):
    assert "\x00" not in text and "\n" not in text.split("\n")[0]
    assert not any(ord(c) < 0x20 and c != "\n" for c in text), repr(text)


def test_nul_and_control_bytes_in_a_refusal__stored_escaped_and_the_row_ends(push_settings, fake, clock):
    fake.configure(force_status=400, body_mode="nul")
    notification, attempt, report = deliver_one(clock)
    # PostgreSQL refuses NUL in text: before, the finish rolled back and the row was retried forever.
    assert (notification.status, notification.attempts, attempt.outcome) == ("failed", 1, "permanent")
    assert "\\x00" in attempt.reason and "\\x0d\\x0aevent=completed" in attempt.reason
    for text in (attempt.reason, notification.last_error):
        assert_one_safe_line(text)


def test_binary_body_on_a_5xx__temporary_with_a_readable_reason(push_settings, fake, clock):
    fake.configure(force_status=500, body_mode="binary")
    notification, attempt, _ = deliver_one(clock)
    assert (notification.status, notification.attempts, attempt.outcome) == ("pending", 1, "temporary")
    assert "\ufffd" in attempt.reason  # invalid UTF-8 decoded with replacement
    assert_one_safe_line(attempt.reason)


@pytest.mark.parametrize("where", ["headers", "body"])
def test_trickled_answer__the_whole_exchange_is_capped_by_the_timeout(push_settings, fake, clock, settings, where):
    settings.WEAVE = {**push_settings, "PUSH_TIMEOUT": 0.5}
    # One byte every 0.1 s keeps every single read well inside the 0.5 s timeout, for 6 s in all.
    fake.configure(trickle=where, trickle_interval=0.1, trickle_seconds=6.0)
    notification, attempt, _ = deliver_one(clock)
    assert (notification.status, attempt.outcome) == ("pending", "unknown")
    assert "No response within 0.5 s" in attempt.reason
    # We hung up before the trickle ended (before: the send lasted the full 6 s): the fake saw the client
    # go while it was still trickling, and never finished the answer.
    assert wait_for(lambda: fake.stats()["aborted"] == 1), fake.stats()
    assert fake.stats()["completed_hostile"] == 0


def test_huge_body__read_up_to_the_cap_and_the_rest_dropped(push_settings, fake, clock):
    fake.configure(body_mode="huge", huge_bytes=64 * 1024 * 1024)
    notification, attempt, _ = deliver_one(clock)
    # Delivered (2xx) with the problem noted: the body was cut, so it is not read as JSON.
    assert (notification.status, attempt.outcome) == ("delivered", "delivered")
    assert "body cut at 65536 bytes" in attempt.reason
    assert wait_for(lambda: fake.stats()["aborted"] == 1), fake.stats()
    # The peer could not push the 64 MiB through: the worker stopped reading (kernel buffers aside).
    assert fake.stats()["bytes_sent"] < 32 * 1024 * 1024


def test_redirect__never_followed_never_permanent_opens_the_breaker_and_names_the_location(push_settings, fake, clock):
    NotificationFactory.create_batch(4, next_attempt_at=clock.current)
    fake.configure(redirect_to="http://admin:hunter22@push.example/v2/send", redirect_status=301)
    report = deliver_batch(clock=clock, concurrency=1)
    assert fake.stats()["requests"] == 1  # not followed, and the breaker stopped the batch at once
    assert report.breaker.startswith("Circuit breaker opened")
    assert (report.sent, report.temporary, report.released) == (1, 1, 3)
    (attempt,) = DeliveryAttempt.objects.all()
    assert (attempt.outcome, attempt.http_status, attempt.notification.status) == ("temporary", 301, "pending")
    assert "http://[redacted]@push.example/v2/send" in attempt.reason
    assert "hunter22" not in attempt.reason + report.breaker
    assert set(Notification.objects.values_list("status", flat=True)) == {"pending"}


def test_echoed_credentials__never_stored_logged_or_explained(push_settings, fake, clock, caplog):
    fake.configure(force_status=401, body_mode="echo")
    with caplog.at_level(logging.DEBUG, logger="weave"):
        notification, attempt, report = deliver_one(clock)
    assert attempt.outcome == "temporary" and report.breaker
    assert "[redacted]" in attempt.reason
    story = explain_notification(notification.pk, clock=clock)
    for text in (attempt.reason, notification.last_error, report.breaker, caplog.text, str(story.summary)):
        assert TOKEN not in text


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_http_date__is_the_due_time_on_the_database_clock(push_settings, fake, clock, status):
    if status == 503:
        fake.configure(force_status=503, retry_after="date:120", retry_after_on_503=True)
    else:
        fake.configure(rate_429=1.0, retry_after="date:120")
    notification, attempt, _ = deliver_one(clock)
    assert attempt.outcome == "temporary"
    # An HTTP-date has one-second resolution.
    low, high = clock.current + timedelta(seconds=118), clock.current + timedelta(seconds=121)
    assert low <= notification.next_attempt_at <= high
    assert low <= attempt.retry_at <= high
    assert "Retry-After" in attempt.reason


def test_group_finish_that_fails__finished_row_by_row_and_every_attempt_counts(push_settings, fake, clock, monkeypatch):
    rows = NotificationFactory.create_batch(6, next_attempt_at=clock.current)
    fake.configure(force_status=503)
    real = completer.insert_receipts
    poison = rows[2].pk

    def fragile(receipts, **kwargs):
        # The group's statement fails (as a NUL byte made it fail before); so does the poison row's own
        # insert while it still carries the provider's text.
        if len(receipts) > 1 or any(
            r.notification_id == poison and "could not be stored" not in r.reason for r in receipts
        ):
            raise DataError("invalid byte sequence for encoding UTF8: 0x00")
        return real(receipts, **kwargs)

    monkeypatch.setattr(completer, "insert_receipts", fragile)
    report = deliver_batch(clock=clock, concurrency=6)
    assert report.fallbacks >= 1
    assert set(Notification.objects.values_list("status", "attempts", "owner")) == {("pending", 1, None)}
    assert DeliveryAttempt.objects.count() == 6
    bad = DeliveryAttempt.objects.get(notification_id=poison)
    assert "could not be stored as it was (DataError" in bad.reason

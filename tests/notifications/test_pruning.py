"""Dead tokens are pruned under the guard; expired rows and rows of inactive devices are never sent."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from notifications.delivery import Hooks, deliver_batch
from notifications.models import DeliveryAttempt, Device, Notification
from notifications.services import device_register
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db
TTL = 30


@pytest.fixture
def device(push_settings):
    user = get_user_model().objects.create_user("alice")
    return device_register(user=user, backend="default", token="phone-1")


def row_for(device, clock, **fields):
    fields.setdefault("next_attempt_at", clock.current)
    return NotificationFactory(device=device, device_token=device.token, backend=device.backend, **fields)


def test_prune__a_410_deactivates_the_device_and_fails_its_queued_rows(push_settings, fake, clock, device):
    fake.configure(force_status=410)
    sent = row_for(device, clock)
    later = row_for(device, clock, next_attempt_at=clock.current + timedelta(hours=1))  # not due: queued

    report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    device.refresh_from_db()
    assert (report.failed, report.pruned) == (1, 1)
    assert device.active is False and device.deactivated_at is not None
    assert "The provider refused its token" in device.deactivation_reason and "410" in device.deactivation_reason
    sent.refresh_from_db()
    later.refresh_from_db()
    assert sent.status == "failed" and "410" in sent.last_error
    assert later.status == "failed" and later.last_error.startswith("Not sent: the device was deactivated")
    assert fake.stats()["requests"] == 1  # the queued row was never sent


def test_prune__a_stale_worker_cannot_deactivate_the_device(push_settings, fake, clock, device):
    fake.configure(force_status=410, latency_ms=50)
    row = row_for(device, clock)
    seen = {}

    def takeover(_pks):
        if seen:
            return
        # A's 410 is in, but A's lease ran out: B takes the row, and the token works again for B.
        clock.advance(TTL + 1)
        fake.configure(force_status=None)
        seen["b"] = deliver_batch(clock=clock, owner="worker-b", ttl=TTL)

    a = deliver_batch(clock=clock, owner="worker-a", ttl=TTL, hooks=Hooks(before_finish=takeover))

    assert seen["b"].delivered == 1
    assert (a.lease_lost, a.pruned) == (1, 0)
    device.refresh_from_db()
    assert (device.active, device.deactivated_at, device.deactivation_reason) == (True, None, "")
    row.refresh_from_db()
    assert (row.status, row.fence, row.owner) == ("delivered", 2, None)
    outcomes = list(DeliveryAttempt.objects.filter(notification=row).values_list("owner", "outcome").order_by("fence"))
    assert outcomes == [("worker-a", "lease_lost"), ("worker-b", "delivered")]


def test_prune__without_the_guard_landing_nothing_is_deactivated_even_for_a_raw_token(push_settings, fake, clock):
    """Control for the test above: when A's guard does land, the same answer does deactivate."""
    user = get_user_model().objects.create_user("bob")
    device = device_register(user=user, backend="default", token="raw-token")
    fake.configure(force_status=410)
    NotificationFactory(device_token="raw-token", backend="default", next_attempt_at=clock.current)  # no device FK

    report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    device.refresh_from_db()
    assert report.pruned == 1 and device.active is False


def test_expiry__a_row_past_expires_at_is_never_sent_and_ends_expired(push_settings, fake, clock):
    stale = NotificationFactory(next_attempt_at=clock.current, expires_at=clock.current - timedelta(seconds=5))
    fresh = NotificationFactory(next_attempt_at=clock.current, expires_at=clock.current + timedelta(minutes=5))

    report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert (report.expired, report.delivered, report.sent) == (1, 1, 1)
    assert (stale.status, stale.attempts, stale.owner) == ("expired", 0, None)
    assert stale.last_error.startswith("Expired at 2030-01-01 11:59:55 UTC, 5.0 s before it could be sent")
    (receipt,) = DeliveryAttempt.objects.filter(notification=stale)  # who ended it, at which fence, when
    assert (receipt.outcome, receipt.owner, receipt.fence, receipt.number) == ("not_sent", "worker-a", 1, None)
    assert receipt.reason == stale.last_error
    assert fresh.status == "delivered"
    assert fake.stats()["requests"] == 1


def test_expiry__a_row_that_expires_while_it_waits_for_a_retry_is_not_sent_again(push_settings, fake, clock):
    fake.configure(force_status=503)
    row = NotificationFactory(next_attempt_at=clock.current, expires_at=clock.current + timedelta(seconds=10))
    deliver_batch(clock=clock, owner="worker-a", ttl=TTL)
    row.refresh_from_db()
    assert row.status == "pending" and row.attempts == 1

    fake.configure(force_status=None)
    clock.advance(3600)  # well past both the retry's due time and the expiry
    report = deliver_batch(clock=clock, owner="worker-b", ttl=TTL)

    row.refresh_from_db()
    assert (report.expired, row.status, row.attempts) == (1, "expired", 1)
    assert fake.stats()["requests"] == 1


def test_inactive_device__its_claimed_rows_end_failed_unsent(push_settings, fake, clock, device):
    row = row_for(device, clock)
    # Deactivated by someone else after the row was queued (e.g. another worker's 410 for the device).
    Device.objects.filter(pk=device.pk).update(active=False, deactivation_reason="Unregistered (410)")

    report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    row.refresh_from_db()
    assert (report.failed, report.sent) == (1, 0)
    assert (row.status, row.attempts, row.owner) == ("failed", 0, None)
    assert row.last_error == "Not sent: the device was deactivated (Unregistered (410))."
    assert fake.stats()["requests"] == 0


def test_inactive_device__rows_behind_a_pruned_one_in_the_same_claim_are_not_sent(push_settings, fake, clock, device):
    fake.configure(force_status=410, latency_ms=30)
    rows = [row_for(device, clock) for _ in range(3)]

    report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL, concurrency=1)

    assert report.pruned == 1 and report.sent == 1
    assert set(Notification.objects.filter(pk__in=[r.pk for r in rows]).values_list("status", flat=True)) == {"failed"}
    assert fake.stats()["requests"] == 1


def test_expiry__the_timeline_says_who_ended_it_unsent(push_settings, fake, clock):
    from notifications.explain import explain_notification

    row = NotificationFactory(next_attempt_at=clock.current, expires_at=clock.current - timedelta(seconds=1))
    deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    timeline = explain_notification(row.pk, clock=clock)

    text = timeline.as_text()
    assert "not_sent" in text and "fence 1 ended it without sending" in text
    assert "sent key" not in text
    assert "Weave never sent it to the provider; the notification is expired: Expired at" in timeline.summary

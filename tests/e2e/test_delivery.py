"""`notification_create` in the test process reaches the fake provider through a real qcluster."""

import pytest

from notifications.models import DeliveryAttempt, Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from tools.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_notification_create__is_delivered_by_a_real_qcluster(groups, worker_env):
    with FakePushProvider(latency_ms=10) as fake:
        cluster = groups.manage("qcluster", "qcluster", env={**worker_env, "WEAVE_PUSH_URL": fake.push_url})

        notification = notification_create(device_token="device-e2e-1", title="Hello", body="From the e2e test")

        def delivered() -> bool:
            assert cluster.alive(), cluster.log_tail()
            return Notification.objects.get(pk=notification.pk).status == Notification.Status.DELIVERED

        wait_until(delivered, timeout=90, message="the notification to be delivered")
        stats = fake.stats()

    notification.refresh_from_db()
    assert str(notification.idempotency_key) in stats["delivered_keys"]
    assert stats["unique_deliveries"] == 1
    assert notification.owner is None and notification.attempts == 1
    (attempt,) = DeliveryAttempt.objects.filter(notification=notification)
    assert attempt.outcome == DeliveryAttempt.Outcome.DELIVERED
    assert attempt.fence == notification.fence

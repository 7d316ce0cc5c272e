"""PostgreSQL: two workers drain a backlog through a faulty provider until every row is terminal."""

import time

import pytest

from notifications.delivery import drain
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory
from tests.threads import run_threads
from weave.leases import DatabaseClock

ROWS = 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_faulty_provider__every_row_ends_delivered_and_each_key_is_delivered_once(push_settings, fake, settings):
    settings.WEAVE = {
        **push_settings,
        "PUSH_TIMEOUT": 0.5,
        "PUSH_LEASE_TTL": 5.0,
        "PUSH_MAX_ATTEMPTS": 20,
        "PUSH_BACKOFF_BASE": 0.05,
        "PUSH_BACKOFF_MAX": 0.2,
        "PUSH_BREAKER_THRESHOLD": 50,  # this test is about retries, not the breaker
    }
    fake.configure(
        latency_ms=5,
        rate_429=0.05,
        retry_after="0",
        rate_5xx=0.1,
        rate_hang=0.02,
        hang_seconds=1.0,
        rate_drop=0.02,
        seed=3,
    )
    NotificationFactory.create_batch(ROWS)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())
    deadline = time.monotonic() + 60

    def worker(name: str) -> None:
        while time.monotonic() < deadline and Notification.objects.filter(status="pending").exists():
            drain(owner=f"{name}-{time.monotonic()}", batch_size=20, concurrency=5, enqueue_more=False)
            time.sleep(0.05)  # real time for due retries to come due (backoff is ≤ 0.2 s)

    run_threads(worker, ["a", "b"])
    assert set(Notification.objects.values_list("status", flat=True)) == {"delivered"}
    stats = fake.stats()
    keys = {str(k) for k in Notification.objects.values_list("idempotency_key", flat=True)}
    assert set(stats["delivered_keys"]) == keys and stats["unique_deliveries"] == ROWS
    assert stats["requests"] > ROWS  # the faults did fire
    # Exactly one delivered attempt per row; every other attempt is an explained failure.
    delivered = DeliveryAttempt.objects.filter(outcome="delivered")
    assert delivered.count() == ROWS
    assert set(delivered.values_list("notification_id", flat=True)) == set(
        Notification.objects.values_list("pk", flat=True)
    )
    assert DeliveryAttempt.objects.count() == sum(stats["per_key"].values()) == stats["requests"]

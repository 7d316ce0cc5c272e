"""Checks before each send: the batch lease is renewed while work goes on, and lost rows are never sent."""

import pytest

from notifications.delivery import Hooks, PushWorker, deliver_batch
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db
TTL = 30


def test_long_batch__lease_is_renewed_before_it_runs_out(push_settings, fake, clock):
    NotificationFactory.create_batch(6, next_attempt_at=clock.current)

    def slow_batch(_pk):
        clock.advance(12)  # 6 × 12 s = 72 s of work under a 30 s lease

    report = deliver_batch(clock=clock, ttl=TTL, budget=120, concurrency=1, hooks=Hooks(before_send=slow_batch))
    assert (report.delivered, report.lease_lost, report.skipped) == (6, 0, 0)
    assert set(DeliveryAttempt.objects.values_list("outcome", "fence")) == {("delivered", 1)}


def test_rows_taken_over_mid_batch__are_skipped_not_sent(push_settings, fake, clock):
    NotificationFactory.create_batch(5, next_attempt_at=clock.current)
    b = PushWorker(clock=clock, owner="worker-b", ttl=TTL)
    taken = {}

    def stall_then_lose_everything(_pk):
        if not taken:
            clock.advance(TTL + 1)  # A stalls past its lease just as it sends the first row
            taken["batch"] = b.claim()

    a = deliver_batch(
        clock=clock, owner="worker-a", ttl=TTL, concurrency=1, hooks=Hooks(before_send=stall_then_lose_everything)
    )
    assert len(taken["batch"]) == 5
    # The row already on its way is refused at finish; the other four are never sent by A.
    assert (a.sent, a.lease_lost, a.skipped, a.delivered) == (1, 1, 4, 0)
    assert fake.stats()["requests"] == 1
    assert list(DeliveryAttempt.objects.values_list("outcome", flat=True)) == ["lease_lost"]
    assert set(Notification.objects.values_list("owner", "fence", "status")) == {("worker-b", 2, "pending")}
    b.close()

"""The seed's overlap test: a stale worker's late answers cannot touch the row another worker took over."""

import pytest

from notifications.delivery import Hooks, PushWorker, deliver_batch
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db
TTL = 30
STATE = ("status", "attempts", "delivered_at", "owner", "fence", "lease_expires_at", "last_error", "next_attempt_at")


def state(pks):
    return {row["id"]: row for row in Notification.objects.filter(pk__in=pks).values("id", *STATE)}


def test_overlap__late_answers_of_a_stale_worker_leave_the_new_holders_state_untouched(push_settings, fake, clock):
    fake.configure(latency_ms=100)  # A's requests are still out when its lease runs out
    pks = [n.pk for n in NotificationFactory.create_batch(3, next_attempt_at=clock.current)]
    seen: dict = {}

    def takeover(_finishing):
        if seen:
            return
        # A has claimed and sent; its first answer is in. Time runs past A's lease, B takes the rows.
        clock.advance(TTL + 1)
        seen["b"] = deliver_batch(clock=clock, owner="worker-b", ttl=TTL)
        seen["after_b"] = state(pks)
        clock.advance(1)  # A's late answers land at a later time, so any write of theirs would show

    a = deliver_batch(clock=clock, owner="worker-a", ttl=TTL, hooks=Hooks(before_finish=takeover))

    # B claimed every row at fence + 1 and finished them.
    assert seen["b"].claimed == 3 and seen["b"].delivered == 3
    after_b = seen["after_b"]
    assert {row["fence"] for row in after_b.values()} == {2}
    assert {row["status"] for row in after_b.values()} == {"delivered"}
    # A's answers arrived afterwards and A tried to finish: B's state is exactly as B left it.
    assert state(pks) == after_b
    assert a.lease_lost == 3 and a.delivered == 0
    for pk in pks:
        attempts = list(DeliveryAttempt.objects.filter(notification_id=pk).order_by("fence"))
        assert [(x.owner, x.fence, x.outcome) for x in attempts] == [
            ("worker-a", 1, "lease_lost"),
            ("worker-b", 2, "delivered"),
        ]
        assert "refused" in attempts[0].reason and "fence 2 took the row over" in attempts[0].reason
    # The provider saw the same idempotency key from both workers, and delivered each message once.
    stats = fake.stats()
    keys = {str(k) for k in Notification.objects.filter(pk__in=pks).values_list("idempotency_key", flat=True)}
    assert {key: stats["per_key"][key] for key in keys} == dict.fromkeys(keys, 2)
    assert stats["unique_deliveries"] == 3


def test_overlap__refusal_names_the_worker_that_holds_the_row_now(push_settings, fake, clock):
    pks = [n.pk for n in NotificationFactory.create_batch(2, next_attempt_at=clock.current)]
    b = PushWorker(clock=clock, owner="worker-b", ttl=TTL)
    held: dict = {}

    def takeover(_finishing):
        if not held:
            clock.advance(TTL + 1)
            held["batch"] = b.claim()

    a = deliver_batch(clock=clock, owner="worker-a", ttl=TTL, hooks=Hooks(before_finish=takeover))
    assert a.lease_lost == 2
    attempts = list(DeliveryAttempt.objects.filter(notification_id__in=pks))
    assert sorted(attempt.notification_id for attempt in attempts) == sorted(pks)  # one each, none missing
    for attempt in attempts:
        assert attempt.outcome == "lease_lost"
        assert "now held by worker-b at fence 2" in attempt.reason
    assert set(Notification.objects.values_list("status", "attempts", "owner", "fence")) == {
        ("pending", 0, "worker-b", 2)
    }
    # B is unaffected by A's refusals and finishes normally.
    report = b.deliver(held["batch"])
    b.close()
    assert report.delivered == 2
    assert set(Notification.objects.values_list("status", "attempts", "owner")) == {("delivered", 1, None)}

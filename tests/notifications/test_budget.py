"""The execution budget: no row starts after it is spent; unstarted rows go back at once and out next drain."""

import pytest
from django_q.models import OrmQ

from notifications.delivery import Hooks, drain
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db


def test_budget__spent_mid_batch_releases_unstarted_rows_for_the_next_drain(push_settings, fake, clock):
    rows = NotificationFactory.create_batch(10, next_attempt_at=clock.current)
    started: list[int] = []

    def spend_budget_on_third(pk):
        started.append(pk)
        if len(started) == 3:
            clock.advance(11)  # past the 10 s budget, well inside the 60 s lease

    report = drain(clock=clock, budget=10, ttl=60, concurrency=1, hooks=Hooks(before_send=spend_budget_on_third))

    assert report.budget_spent and report.sent == 3 and report.delivered == 3 and report.released == 7
    assert fake.stats()["requests"] == 3  # nothing started after the budget ran out
    unstarted = Notification.objects.exclude(pk__in=started)
    assert set(unstarted.values_list("status", "attempts", "owner", "lease_expires_at", "fence")) == {
        ("pending", 0, None, None, 1)
    }
    assert not DeliveryAttempt.objects.filter(notification__in=unstarted).exists()
    # Claimable right now, and the next drain was enqueued because due rows remain.
    assert set(Notification.objects.claimable(clock).values_list("pk", flat=True)) == set(
        unstarted.values_list("pk", flat=True)
    )
    assert report.more_enqueued
    assert [q.name() for q in OrmQ.objects.all()] == ["notifications.drain"]

    nxt = drain(clock=clock, enqueue_more=False)
    assert nxt.delivered == 7 and not nxt.budget_spent
    assert set(Notification.objects.values_list("status", flat=True)) == {"delivered"}
    assert fake.stats()["unique_deliveries"] == len(rows) == fake.stats()["requests"]

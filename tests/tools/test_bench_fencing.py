"""The fencing bench's counting and its unfenced variant, against the real lease core (no timings here)."""

import uuid
from contextlib import nullcontext

import pytest
from django.utils import timezone

from bench.fencing import bootstrap_median, counting, verdict
from bench.unfenced import guards_removed
from notifications.models import Notification
from weave.leases import Lease

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(n: int) -> None:
    now = timezone.now()
    Notification.objects.bulk_create(
        Notification(device_token=f"d-{i}", title="t", body="b", idempotency_key=uuid.uuid4(), next_attempt_at=now)
        for i in range(n)
    )


def _claim(n: int):
    return Notification.objects.filter(status="pending").claim_batch(owner="bench-test", ttl=60, limit=n)


@pytest.mark.parametrize("unfenced", [False, True])
def test_the_drains_guarded_statements_are_told_apart_and_their_rows_counted(unfenced):
    _rows(5)
    with counting() as tally, guards_removed() if unfenced else nullcontext():
        batch = _claim(5)
        Notification.objects.renew_batch(batch, ttl=60)
        landed = Notification.objects.release_each([(batch.lease(pk), {"last_error": "x"}) for pk in batch.fences])
    assert len(landed) == 5
    # SQLite's claim also sends a BEGIN of its own; the bench runs on PostgreSQL, where it does not.
    updates = {kind: n for kind, n in tally.by_kind.items() if kind.startswith("UPDATE")}
    assert updates == {"UPDATE claim": 1, "UPDATE renew": 1, "UPDATE finish": 1}
    assert tally.statements == sum(tally.by_kind.values())
    assert tally.rows_by_kind["UPDATE renew"] == 5


def test_the_unfenced_variant_drops_the_fence_and_only_while_it_is_on():
    _rows(2)
    batch = _claim(2)
    pk, other = list(batch.fences)
    stale = Lease(pk=pk, owner="bench-test", fence=batch.fences[pk] - 1)  # an older holder's fence
    assert Notification.objects.release_each([(stale, {"last_error": "stale"})]) == set()
    with guards_removed():
        assert Notification.objects.release_each([(stale, {"last_error": "stale"})]) == {pk}
    # Put back: the guard refuses a stale fence again.
    stale_other = Lease(pk=other, owner="bench-test", fence=batch.fences[other] - 1)
    assert Notification.objects.release_each([(stale_other, {"last_error": "stale"})]) == set()


def test_the_verdict_needs_the_whole_interval_on_one_side_of_the_limit():
    assert verdict(0.98, 1.04) == "met"
    assert verdict(1.06, 1.20) == "missed"
    assert verdict(1.00, 1.06) == "not resolved"
    values = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97]
    low, high = bootstrap_median(values)
    assert low <= 1.0 <= high
    assert (low, high) == bootstrap_median(values)  # seeded

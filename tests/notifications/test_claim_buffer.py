"""The claim buffer alone: claim in due order, keep leases alive, hand back unstarted rows without an attempt."""

from datetime import timedelta

import pytest

from notifications.delivery.claims import ClaimBuffer
from notifications.models import Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db
TTL = 30


def _buffer(clock, owner="buffer-a") -> ClaimBuffer:
    return ClaimBuffer(owner=owner, clock=clock, ttl=TTL, renew_margin=10)


def test_claim__rows_in_due_order_with_their_fences_and_messages(clock):
    late = NotificationFactory(next_attempt_at=clock.current - timedelta(seconds=1), collapse_key="c")
    early = NotificationFactory(next_attempt_at=clock.current - timedelta(seconds=5))
    NotificationFactory(next_attempt_at=clock.current + timedelta(seconds=60))  # not due
    buffer = _buffer(clock)
    claim, rows = buffer.claim(10)
    assert [row.pk for row in rows] == [early.pk, late.pk]
    assert {row.fence for row in rows} == {1} and claim.open == 2
    assert rows[1].message.collapse_key == "c" and rows[0].message.token == early.device_token
    assert buffer.claims == [claim]
    assert set(Notification.objects.filter(owner="buffer-a").values_list("pk", flat=True)) == {early.pk, late.pk}
    # The database's time is estimated from the claim's instant, without a query.
    clock.advance(3)
    assert claim.database_time(clock.monotonic()) == clock.current


def test_keep_alive__renews_only_near_expiry_and_drops_rows_someone_took(clock):
    NotificationFactory.create_batch(3, next_attempt_at=clock.current)
    buffer = _buffer(clock)
    claim, rows = buffer.claim(10)
    clock.advance(5)
    buffer.keep_alive()  # 25 s left, more than the 10 s margin: no statement
    assert set(Notification.objects.values_list("lease_expires_at", flat=True)) == {
        clock.current + timedelta(seconds=25)
    }
    # A rival takes one row over after our lease lapsed on it (forced here by expiring that row only).
    taken = rows[0].pk
    Notification.objects.filter(pk=taken).update(lease_expires_at=clock.current - timedelta(seconds=1))
    rival = Notification.objects.filter(pk=taken).claim_batch(owner="rival", ttl=600, limit=1, clock=clock)
    assert list(rival.fences) == [taken]
    clock.advance(16)  # 9 s left: renew
    buffer.keep_alive()
    assert taken not in claim.batch and len(claim.batch) == 2
    renewed = Notification.objects.filter(owner="buffer-a")
    assert set(renewed.values_list("lease_expires_at", flat=True)) == {clock.current + timedelta(seconds=TTL)}
    # The rival's row is untouched: its owner, fence and expiry are the rival's.
    assert Notification.objects.filter(pk=taken).values_list("owner", "fence").get() == ("rival", 2)


def test_release__hands_rows_back_without_an_attempt_and_only_its_own(clock):
    NotificationFactory.create_batch(3, next_attempt_at=clock.current)
    buffer = _buffer(clock)
    claim, rows = buffer.claim(10)
    lost = rows[2]
    claim.batch.drop(lost.pk)  # found lost earlier (renewal refused): not ours to release
    Notification.objects.filter(pk=lost.pk).update(owner="rival", fence=5)
    until = clock.now(timedelta(seconds=90))
    released = buffer.release(rows, "held for a test", next_attempt_at=until, last_error="held for a test")
    assert released == 2 and claim.open == 0
    mine = Notification.objects.filter(pk__in=[rows[0].pk, rows[1].pk])
    assert set(mine.values_list("owner", "attempts", "next_attempt_at", "last_error")) == {
        (None, 0, clock.current + timedelta(seconds=90), "held for a test")
    }
    assert Notification.objects.filter(pk=lost.pk).values_list("owner", "fence", "last_error").get() == ("rival", 5, "")
    buffer.forget_done()
    assert buffer.claims == []


def test_claim__with_the_database_clock_the_statement_is_compiled_once_per_buffer():
    from unittest import mock

    from django.db.models.sql.compiler import SQLUpdateCompiler

    from weave.leases import default_clock

    NotificationFactory.create_batch(3, next_attempt_at=default_clock.read() - timedelta(minutes=1))
    buffer = ClaimBuffer(owner="buffer-a", clock=default_clock, ttl=TTL, renew_margin=10)
    with mock.patch.object(
        SQLUpdateCompiler, "as_sql", autospec=True, side_effect=SQLUpdateCompiler.as_sql
    ) as compiled:
        _, first = buffer.claim(2)
        _, second = buffer.claim(2)
        _, third = buffer.claim(2)
    assert compiled.call_count == 1  # the first claim's; the others ran the same statement
    assert (len(first), len(second), third) == (2, 1, [])
    assert Notification.objects.filter(owner="buffer-a", fence=1).count() == 3

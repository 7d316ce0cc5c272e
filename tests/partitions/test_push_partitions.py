"""PostgreSQL, real time: a push worker cut off from the database during a group finish (issue 17).

Worker A's group finish released its rows in one guarded UPDATE; the link then fell silent before
the attempt rows and the COMMIT. The server aborts that transaction, so its row locks go and none of
its writes land; `SKIP LOCKED` claims stop passing over the rows once A's lease could have expired.
B delivers them again under the same idempotency keys: the provider delivers each message once.
"""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Max

from notifications.delivery import deliver_batch
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory
from tests.partitions.conftest import RECOVERY_SLACK, RECOVERY_WAIT, TTL, run_in_thread
from tests.timings import report_timing
from weave.worker_db import is_cut_off

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
TABLE = Notification._meta.db_table
ROWS = 3


def _db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def test_partition_during_group_finish__locks_freed_and_b_delivers_each_once(push_settings, fake, cut_off):
    NotificationFactory.create_batch(ROWS, next_attempt_at=_db_now() - timedelta(seconds=1))
    cut = cut_off("push-a")
    # A's group finish (CASE form or UPDATE ... FROM (VALUES ...)) landed; its attempt rows and COMMIT will not.
    cut.after(rf'UPDATE "{TABLE}".*(CASE WHEN|FROM \(VALUES|FROM unnest)')
    thread, result = run_in_thread("push-a", lambda: deliver_batch(owner="push-a", ttl=TTL, batch_size=ROWS))
    cut.wait_cut()
    a_expires = Notification.objects.aggregate(latest=Max("lease_expires_at"))["latest"]
    assert Notification.objects.filter(owner="push-a").count() == ROWS  # nothing of A's finish committed

    # B drains with no other traffic until every row is delivered; the wait is bounded on the database
    # clock (each pass waits a little: `cut.fired` is already set, so it cannot pace the loop).
    deadline = a_expires + timedelta(seconds=RECOVERY_WAIT)
    while _db_now() <= deadline:
        deliver_batch(owner="push-b", ttl=30, batch_size=ROWS)
        if not Notification.objects.exclude(status="delivered").exists():
            break
        time.sleep(0.05)
    recovered_at = _db_now()
    assert not Notification.objects.exclude(status="delivered").exists()
    # B never took a row while A's lease could still be live (the database clock decides).
    b_started = DeliveryAttempt.objects.filter(owner="push-b").values_list("started_at", flat=True)
    assert len(b_started) == ROWS and min(b_started) >= a_expires
    report_timing("push partition: every row delivered after A's lease could expire",
                  (recovered_at - a_expires).total_seconds(), target=TTL + RECOVERY_SLACK, what="seconds")  # fmt: skip

    cut.proxy.heal()
    thread.join(30)
    assert not thread.is_alive()
    # A learns on healing that the server ended its session. Either its drain fails with that error, or
    # its row-by-row fallback reconnects after healing and its guards are refused: then it writes only
    # its own honest ending, a lease_lost attempt per row naming the new holder.
    if "error" in result:
        assert is_cut_off(result["error"]), result
        assert not DeliveryAttempt.objects.filter(owner="push-a").exists()
    else:
        endings = list(DeliveryAttempt.objects.filter(owner="push-a").values_list("outcome", "reason"))
        assert endings and {outcome for outcome, _ in endings} == {"lease_lost"}, endings
        assert all("fence 2 took the row over" in reason for _, reason in endings), endings
    assert set(Notification.objects.values_list("fence", "owner", "status")) == {(2, None, "delivered")}
    assert set(DeliveryAttempt.objects.exclude(owner="push-a").values_list("owner", "outcome")) == {
        ("push-b", "delivered")
    }
    stats = fake.stats()
    assert stats["unique_deliveries"] == ROWS  # re-sent under the same keys, delivered once each


def test_link_drops_between_renewals__the_next_renewal_goes_out_on_a_fresh_connection(
    push_settings, fake, cut_off, caplog
):
    """A's link drops while its rows are out; its next renewal meets the dead connection. The drain must
    not end with that error, nor keep the dead connection: it retries on a fresh one, and the lease lives."""
    from notifications.delivery.worker import PushWorker

    NotificationFactory.create_batch(ROWS, next_attempt_at=_db_now() - timedelta(seconds=1))
    cut = cut_off("push-a")

    def renew_across_a_cut():
        worker = PushWorker(owner="push-a", ttl=TTL, batch_size=ROWS)
        try:
            batch = worker.claim()
            buffer = worker.buffer
            cut.proxy.cut_clients()  # the link drops while the rows are out
            [claim] = buffer.claims
            claim.deadline = 0.0  # renewal due now
            buffer.keep_alive()  # meets the dead connection: no error, a retry soon
            assert claim.deadline == 0.0 and buffer.seconds_to_renewal() < 0
            time.sleep(buffer.renew_margin / 3 + 0.05)
            buffer.keep_alive()  # on a fresh connection
            return dict(batch.fences), claim.deadline, batch.expires_at
        finally:
            worker.close()

    thread, result = run_in_thread("push-a", renew_across_a_cut)
    thread.join(30)
    assert not thread.is_alive() and "error" not in result, result.get("traceback", result)
    fences, deadline, claimed_until = result["value"]
    assert len(fences) == ROWS and deadline > 0.0 and cut.proxy.cuts == 1
    assert "event=renewal_retry" in caplog.text
    # Renewed under A's lease: still A's, expiring later than the claim said.
    rows = Notification.objects.filter(pk__in=fences)
    assert set(rows.values_list("owner", "fence")) == {("push-a", 1)}
    assert all(row.lease_expires_at > claimed_until for row in rows)

"""PostgreSQL: a claim never waits on a row lock, and a lease is never born expired (issue 17).

A worker cut off from the database mid-transaction leaves its row locked until the server aborts
that transaction. A claim that queued behind such a lock used to land with the expiry it computed
before the wait: a lease born expired. Here another session holds the row lock for longer than the
TTL; the claim must refuse at once (`LeaseBusy`) or, if it ever lands, hold a full TTL counted
from when the lock was let go.
"""

import threading
from datetime import datetime, timedelta

import psycopg
import pytest
from django.db import connection

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import DatabaseClock, LeaseBusy

TTL = 1.0
HOLD = 2.5  # longer than the TTL: a claim that waited this long would be born expired
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class RowLocker:
    """A second session that locks one row in an open transaction, like a cut-off worker's save."""

    def __init__(self, pk: int) -> None:
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self.conn = psycopg.connect(**params, autocommit=False)
        self.conn.execute(f"UPDATE {Job._meta.db_table} SET writes = writes + 1 WHERE id = %s", [pk])

    def db_now(self) -> datetime:
        return self.conn.execute("SELECT clock_timestamp()").fetchone()[0]

    def let_go(self) -> datetime:
        """Roll back (as the server does to a cut-off session); return the database time just before."""
        released = self.db_now()
        self.conn.rollback()
        self.conn.close()
        return released


def _expired_job() -> Job:
    job = JobFactory()
    Job.objects.claim(job.pk, owner="cut-off", ttl=timedelta(seconds=-1), clock=DatabaseClock())
    return job


def _claim_in_thread(queryset_call) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = queryset_call()
        except Exception as exc:  # handed to the test thread
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="claimer")
    thread.start()
    return thread, result


def test_claim__locked_row_is_busy_at_once_never_born_expired():
    job = _expired_job()
    locker = RowLocker(job.pk)
    try:
        thread, result = _claim_in_thread(lambda: Job.objects.claim(job.pk, owner="b", ttl=TTL))
        # The claim must come back while the lock is still held (bounded wait, not a timing claim).
        thread.join(HOLD)
        came_back_while_locked = not thread.is_alive()
    finally:
        released = locker.let_go()
    thread.join(30)
    assert not thread.is_alive()
    if "value" in result:  # it waited and landed: then it must still hold a full TTL from the release
        assert result["value"].expires_at >= released + timedelta(seconds=TTL), "lease born expired"
    assert came_back_while_locked, "the claim waited on the row lock"
    assert isinstance(result.get("error"), LeaseBusy), result
    assert "locked" in str(result["error"])
    # Nothing was written by the refused claim; once the lock is gone the claim lands with a full TTL.
    row = Job.objects.values("owner", "fence").get(pk=job.pk)
    assert row == {"owner": "cut-off", "fence": 1}
    lease = Job.objects.claim(job.pk, owner="b", ttl=TTL)
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (after,) = cursor.fetchone()
    assert lease.fence == 2
    assert lease.expires_at > after, "lease born expired"
    assert lease.expires_at >= released + timedelta(seconds=TTL)


def test_claim_batch__locked_row_is_skipped_at_once_and_others_get_full_ttl():
    locked = _expired_job()
    free = JobFactory()
    locker = RowLocker(locked.pk)
    before = locker.db_now()
    try:
        thread, result = _claim_in_thread(lambda: Job.objects.order_by("pk").claim_batch(owner="b", ttl=TTL, limit=10))
        thread.join(HOLD)
        came_back_while_locked = not thread.is_alive()
    finally:
        locker.let_go()
    thread.join(30)
    assert came_back_while_locked, "the batch claim waited on a row lock"
    batch = result["value"]
    assert set(batch.fences) == {free.pk}
    assert batch.expires_at >= before + timedelta(seconds=TTL)
    assert Job.objects.values("owner", "fence").get(pk=locked.pk) == {"owner": "cut-off", "fence": 1}

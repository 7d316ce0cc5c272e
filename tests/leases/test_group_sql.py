"""The group statements' SQL: one finish plan with two renderers, and the receipt insert."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import JobFactory
from tests.leasetest.models import Job, Receipt
from weave.leases import DatabaseClock, insert_receipts
from weave.leases.bulk import FinishPlan, render_arrays, render_values

pytestmark = pytest.mark.django_db
TTL = 30


def _finish(rows, clock, render):
    plan = FinishPlan.build(Job, rows)
    sql, params = render(plan, connection, "default", clock)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {pk for (pk,) in cursor.fetchall()}


renderers = [render_values]
if connection.vendor == "postgresql":
    renderers.append(render_arrays)


@pytest.mark.parametrize("render", renderers, ids=lambda r: r.__name__)
def test_finish_plan__both_renderers_land_only_rows_still_held_each_with_its_own_fields(clock, render):
    jobs = [JobFactory() for _ in range(3)]
    batch = Job.objects.order_by("pk").claim_batch(owner="me", ttl=TTL, limit=3, clock=clock)
    stolen = batch.lease(jobs[0].pk)
    clock.advance(TTL + 1)
    Job.objects.claim(jobs[0].pk, owner="thief", ttl=TTL, clock=clock)  # fence 2: ours is stale
    mine = Job.objects.filter(pk__in=[j.pk for j in jobs[1:]]).claim_batch(owner="me", ttl=TTL, limit=3, clock=clock)
    rows = [
        (stolen, {"result": "stale", "state": "done"}),
        (mine.lease(jobs[1].pk), {"result": "one", "state": "done"}),
        (mine.lease(jobs[2].pk), {"result": "two"}),  # no state: it keeps "open"
    ]
    assert _finish(rows, clock, render) == {jobs[1].pk, jobs[2].pk}
    got = {j.pk: (j.owner, j.fence, j.result, j.state) for j in Job.objects.all()}
    assert got[jobs[0].pk] == ("thief", 2, "", "open")  # the new owner's row is untouched
    assert got[jobs[1].pk] == (None, 2, "one", "done")
    assert got[jobs[2].pk] == (None, 2, "two", "open")


@pytest.mark.parametrize("render", renderers, ids=lambda r: r.__name__)
def test_finish_plan__a_lapsed_lease_is_refused_by_the_clock_in_the_same_statement(clock, render):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="me", ttl=TTL, clock=clock)
    clock.advance(TTL + 1)
    assert _finish([(lease, {"result": "late"})], clock, render) == set()
    assert Job.objects.get(pk=job.pk).result == ""


def test_insert_receipts__one_statement_with_clock_times(clock):
    job = JobFactory()
    rows = [
        {
            "job": job.pk,
            "owner": "me",
            "fence": n,
            "outcome": "ok" if n % 2 else "retry",
            "finished_at": clock.now(),
            "retry_at": None if n % 2 else clock.now(timedelta(seconds=n)),
        }
        for n in range(1, 6)
    ]
    with CaptureQueriesContext(connection) as queries:
        assert insert_receipts(Receipt, rows) == 5
    assert len(queries) == 1
    got = list(Receipt.objects.order_by("fence").values_list("fence", "outcome", "finished_at", "retry_at"))
    assert got[0] == (1, "ok", clock.current, None)
    assert got[1] == (2, "retry", clock.current, clock.current + timedelta(seconds=2))


def test_insert_receipts__the_database_clock_fills_the_times():
    job = JobFactory()
    real = DatabaseClock()
    before = real.read()
    row = {"job": job.pk, "owner": "me", "fence": 1, "outcome": "retry"}
    insert_receipts(Receipt, [{**row, "finished_at": real.now(), "retry_at": real.now(timedelta(seconds=60))}])
    receipt = Receipt.objects.get()
    assert before <= receipt.finished_at <= real.read()
    assert receipt.retry_at - receipt.finished_at == pytest.approx(timedelta(seconds=60), abs=timedelta(seconds=1))


def test_insert_receipts__rows_must_name_the_same_fields(clock):
    job = JobFactory()
    row = {"job": job.pk, "owner": "me", "fence": 1, "outcome": "ok", "finished_at": clock.now()}
    with pytest.raises(ValueError, match="same fields"):
        insert_receipts(Receipt, [row, {**row, "retry_at": None}])
    assert not Receipt.objects.exists()


def test_clock_read__fake_is_its_literal_and_seconds_until_counts_from_it(clock):
    assert clock.read() == clock.current
    assert clock.seconds_until(clock.current + timedelta(seconds=5)) == 5.0
    assert clock.seconds_until(None) is None

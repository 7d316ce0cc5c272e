"""Claims, renewals, releases and batches."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import Lease, LeaseBusy, LeaseLost, NotClaimable

pytestmark = pytest.mark.django_db
TTL = 30


def row(job) -> dict:
    """Every column of the job's row, as the database holds it now."""
    return Job.objects.values().get(pk=job.pk)


def holder(job) -> tuple:
    """(owner, fence, lease_expires_at) of the job's row now."""
    current = row(job)
    return current["owner"], current["fence"], current["lease_expires_at"]


def test_claim__bumps_fence_and_sets_expiry_from_clock(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    job.refresh_from_db()
    assert (lease.fence, job.fence, job.owner) == (1, 1, "a")
    assert job.lease_expires_at == clock.current + timedelta(seconds=TTL)


def test_claim__live_lease_is_busy_and_untouched(clock):
    job = JobFactory()
    Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    before = Job.objects.values().get(pk=job.pk)
    clock.advance(TTL - 1)
    with pytest.raises(LeaseBusy, match="busy: a holds it at fence 1"):
        Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=clock)
    assert Job.objects.values().get(pk=job.pk) == before


def test_claim__at_the_exact_expiry_instant_the_lease_is_claimable(clock):
    job = JobFactory()
    first = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(TTL - 0.000001)  # one microsecond before the expiry: still a's
    with pytest.raises(LeaseBusy):
        Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=clock)
    clock.advance(0.000001)
    assert Job.objects.get(pk=job.pk).lease_expires_at == clock.current  # exactly the expiry instant

    assert list(Job.objects.free_or_expired(clock).values_list("pk", flat=True)) == [job.pk]
    second = Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=clock)

    job.refresh_from_db()
    assert (second.fence, job.fence, job.owner) == (first.fence + 1, first.fence + 1, "b")
    assert job.lease_expires_at == clock.current + timedelta(seconds=TTL)


def test_claim_batch__takes_a_row_at_the_exact_expiry_instant(clock):
    jobs = JobFactory.create_batch(2)
    Job.objects.claim(jobs[0].pk, owner="a", ttl=TTL, clock=clock)
    Job.objects.claim(jobs[1].pk, owner="a", ttl=TTL + 1, clock=clock)
    clock.advance(TTL)  # jobs[0] expires exactly now; jobs[1] a second later
    batch = Job.objects.claim_batch(owner="b", ttl=TTL, limit=10, clock=clock)
    assert batch.fences == {jobs[0].pk: 2}
    assert Job.objects.get(pk=jobs[1].pk).owner == "a"


def test_claim__outside_claimable_state_is_not_claimable(clock):
    job = JobFactory(state="done")
    before = row(job)
    with pytest.raises(NotClaimable):
        Job.objects.filter(state="open").claim(job.pk, owner="a", ttl=TTL, clock=clock)
    assert row(job) == before and holder(job) == (None, 0, None)


def test_renew__lapsed_lease_cannot_be_renewed_and_reclaim_gives_next_fence(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(TTL + 5)
    before = Job.objects.values().get(pk=job.pk)
    with pytest.raises(LeaseLost, match="our lease expired"):
        Job.objects.renew(lease, ttl=TTL, clock=clock)
    assert Job.objects.values().get(pk=job.pk) == before
    again = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    assert again.fence == lease.fence + 1


def test_renew__live_lease_moves_expiry(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(20)
    Job.objects.renew(lease, ttl=TTL, clock=clock)
    job.refresh_from_db()
    assert job.lease_expires_at == clock.current + timedelta(seconds=TTL)
    assert job.fence == lease.fence  # renewal never changes the fence


def test_takeover__old_holder_write_is_lost(clock):
    job = JobFactory()
    a = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(TTL + 1)
    b = Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=clock)
    Job.objects.guarded_update(b, clock=clock, result="from-b", writes=1)
    before = row(job)
    with pytest.raises(LeaseLost) as caught:
        Job.objects.guarded_update(a, clock=clock, result="from-a", writes=2)
    # The whole refusal: not a column changed, b's owner, fence and expiry intact, nothing of a's landed.
    assert row(job) == before
    assert holder(job) == ("b", b.fence, b.expires_at)
    assert (before["result"], before["writes"]) == ("from-b", 1)
    assert caught.value.holder_fence == b.fence == a.fence + 1


@pytest.mark.parametrize("write", ["guarded_update", "release", "renew"])
def test_an_older_fence_of_the_same_owner_is_refused(clock, write):
    # A worker whose lease lapsed and that claimed the row again holds the new fence only: whatever
    # it still runs under the old lease (a stalled thread, a late callback) must not land.
    job = JobFactory()
    old = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(TTL + 1)
    new = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    Job.objects.guarded_update(new, clock=clock, result="from-the-new-lease", writes=1)
    before = row(job)
    with pytest.raises(LeaseLost, match="now held by a at fence 2"):
        if write == "renew":
            Job.objects.renew(old, ttl=TTL * 10, clock=clock)
        else:
            getattr(Job.objects, write)(old, clock=clock, result="from-the-old-lease", writes=2)
    assert row(job) == before
    assert holder(job) == ("a", new.fence, new.expires_at) and new.fence == old.fence + 1
    assert (before["result"], before["writes"]) == ("from-the-new-lease", 1)


def test_release__clears_holder_keeps_fence_and_is_claimable_at_once(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    Job.objects.release(lease, clock=clock, result="released")
    job.refresh_from_db()
    assert (job.owner, job.lease_expires_at, job.fence, job.result) == (None, None, 1, "released")
    assert Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=clock).fence == 2


def test_release__by_stale_holder_is_refused(clock):
    job = JobFactory()
    a = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(TTL + 1)
    b = Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=clock)
    before = row(job)
    with pytest.raises(LeaseLost, match="now held by b at fence 2"):
        Job.objects.release(a, clock=clock, result="from-a")
    assert row(job) == before
    assert holder(job) == ("b", b.fence, b.expires_at) and before["result"] == ""


def test_claim_batch__takes_free_and_expired_rows_and_skips_live_ones(clock):
    jobs = JobFactory.create_batch(5)
    held = Job.objects.claim(jobs[0].pk, owner="other", ttl=TTL, clock=clock)
    expired = Job.objects.claim(jobs[1].pk, owner="crashed", ttl=1, clock=clock)
    clock.advance(2)
    JobFactory(state="done")
    batch = Job.objects.filter(state="open").order_by("pk").claim_batch(owner="me", ttl=TTL, limit=10, clock=clock)
    assert set(batch.fences) == {j.pk for j in jobs[1:]}
    assert batch.fences[jobs[1].pk] == expired.fence + 1
    assert all(batch.fences[j.pk] == 1 for j in jobs[2:])
    assert Job.objects.get(pk=jobs[0].pk).owner == "other" and held.fence == 1


def test_claim_batch__respects_limit_and_order(clock):
    jobs = JobFactory.create_batch(6)
    batch = Job.objects.order_by("-pk").claim_batch(owner="me", ttl=TTL, limit=2, clock=clock)
    assert set(batch.fences) == {jobs[-1].pk, jobs[-2].pk}


def test_claim_batch__is_one_update(clock):
    JobFactory.create_batch(3)
    with CaptureQueriesContext(connection) as queries:
        Job.objects.claim_batch(owner="me", ttl=TTL, limit=10, clock=clock)
    updates = [q for q in queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 1
    if connection.vendor == "postgresql":
        assert "FOR UPDATE SKIP LOCKED" in updates[0]["sql"]


def test_renew_batch__drops_rows_taken_by_others(clock):
    jobs = JobFactory.create_batch(3)
    batch = Job.objects.claim_batch(owner="me", ttl=5, limit=10, clock=clock)
    clock.advance(6)
    thief = Job.objects.claim(jobs[0].pk, owner="thief", ttl=TTL, clock=clock)
    before = [row(j) for j in jobs]
    lost = Job.objects.renew_batch(batch, ttl=5, clock=clock)
    # All three lapsed; one was taken. A lapsed lease is never renewed, so all three are lost.
    assert set(lost) == {j.pk for j in jobs}
    assert len(batch) == 0
    assert [row(j) for j in jobs] == before  # no expiry moved, the thief's included
    assert holder(jobs[0]) == ("thief", thief.fence, thief.expires_at)


def test_renew_batch__keeps_live_rows(clock):
    JobFactory.create_batch(3)
    batch = Job.objects.claim_batch(owner="me", ttl=10, limit=10, clock=clock)
    clock.advance(8)
    assert Job.objects.renew_batch(batch, ttl=10, clock=clock) == []
    clock.advance(8)  # 16 s after the claim, alive only because of the renewal
    assert Job.objects.live(clock).filter(owner="me").count() == 3


def test_release_batch__only_releases_rows_still_ours(clock):
    jobs = JobFactory.create_batch(3)
    batch = Job.objects.claim_batch(owner="me", ttl=5, limit=10, clock=clock)
    clock.advance(6)
    thief = Job.objects.claim(jobs[0].pk, owner="thief", ttl=TTL, clock=clock)
    before = [row(j) for j in jobs]
    # All lapsed: nothing is ours to release, and 0 rows change.
    assert Job.objects.release_batch(batch, clock=clock, result="stale") == 0
    assert [row(j) for j in jobs] == before
    assert holder(jobs[0]) == ("thief", thief.fence, thief.expires_at)
    assert all(r["result"] == "" for r in before)


def test_claim_rows__returns_the_claimed_rows_data_in_the_same_statement(clock):
    jobs = JobFactory.create_batch(3, phase="p1")
    Job.objects.claim(jobs[0].pk, owner="other", ttl=TTL, clock=clock)  # live: skipped
    with CaptureQueriesContext(connection) as queries:
        batch, rows = Job.objects.order_by("pk").claim_rows(
            owner="me", ttl=TTL, limit=10, fields=["phase", "writes", "lease_expires_at"], clock=clock
        )
    assert [q["sql"].lstrip().upper()[:6] for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))] == [
        "UPDATE"
    ]
    assert sorted(batch.fences) == [jobs[1].pk, jobs[2].pk]
    assert sorted(rows, key=lambda r: r["pk"]) == [
        {"pk": job.pk, "phase": "p1", "writes": 0, "lease_expires_at": clock.current + timedelta(seconds=TTL)}
        for job in jobs[1:]
    ]
    assert batch.expires_at == clock.current + timedelta(seconds=TTL)


def test_claim_rows__also_writes_in_the_claim_and_returns_the_values_after_it(clock):
    jobs = JobFactory.create_batch(2, phase="p1")
    with CaptureQueriesContext(connection) as queries:
        batch, rows = Job.objects.order_by("pk").claim_rows(
            owner="me",
            ttl=TTL,
            limit=1,
            fields=["phase", "writes", "owner", "fence"],
            also={"phase": "p2"},
            clock=clock,
        )
    assert [q["sql"].lstrip().upper()[:6] for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))] == [
        "UPDATE"
    ]
    assert rows == [{"pk": jobs[0].pk, "phase": "p2", "writes": 0, "owner": "me", "fence": batch.fences[jobs[0].pk]}]
    assert row(jobs[0])["phase"] == "p2" and row(jobs[1])["phase"] == "p1"  # only the claimed row got `also`


def test_release_each__one_statement_every_row_under_its_own_guard(clock):
    jobs = JobFactory.create_batch(4)
    batch = Job.objects.claim_batch(owner="me", ttl=5, limit=10, clock=clock)
    clock.advance(6)  # every lease lapsed; a thief takes the first row
    thief = Job.objects.claim(jobs[0].pk, owner="thief", ttl=TTL, clock=clock)
    mine = Job.objects.filter(pk__in=[j.pk for j in jobs[1:]]).claim_batch(owner="me", ttl=TTL, limit=10, clock=clock)
    rows = [
        (Lease(pk=jobs[0].pk, owner="me", fence=batch.fences[jobs[0].pk]), {"result": "stale", "writes": 9}),
        (Lease(pk=jobs[1].pk, owner="me", fence=batch.fences[jobs[1].pk]), {"result": "old fence", "writes": 9}),
        (Lease(pk=jobs[2].pk, owner="someone", fence=mine.fences[jobs[2].pk]), {"result": "wrong owner"}),
        # Current, with a field only this row sets and one set from the clock.
        (Lease(pk=jobs[3].pk, owner="me", fence=mine.fences[jobs[3].pk]), {"result": "done", "state": "closed"}),
    ]
    before = {j.pk: Job.objects.values().get(pk=j.pk) for j in jobs[:3]}

    with CaptureQueriesContext(connection) as queries:
        landed = Job.objects.release_each(rows, clock=clock)

    assert landed == {jobs[3].pk}
    assert [q["sql"].lstrip().upper()[:6] for q in queries] in (["UPDATE"], ["WITH V"])
    assert len(queries) == 1
    # Refused rows: not a byte changed, the thief's lease intact.
    assert {j.pk: Job.objects.values().get(pk=j.pk) for j in jobs[:3]} == before
    done = Job.objects.get(pk=jobs[3].pk)
    assert (done.result, done.state, done.writes, done.owner, done.lease_expires_at) == (
        "done",
        "closed",
        0,
        None,
        None,
    )
    assert done.fence == mine.fences[jobs[3].pk]
    assert Job.objects.get(pk=jobs[0].pk).owner == "thief" and thief.fence == 2


def test_release_each__a_lapsed_lease_is_refused_by_the_clock_in_the_same_statement(clock):
    (job,) = JobFactory.create_batch(1)
    lease = Job.objects.claim(job.pk, owner="me", ttl=5, clock=clock)
    clock.advance(5)  # expiry == now: no longer live
    assert Job.objects.release_each([(lease, {"result": "late"})], clock=clock) == set()
    assert Job.objects.get(pk=job.pk).result == ""
    clock.advance(-1)
    assert Job.objects.release_each([(lease, {"result": "in time"})], clock=clock) == {job.pk}


def test_release_each_returning__the_landed_rows_fields_as_stored_in_the_same_one_statement(clock):
    jobs = JobFactory.create_batch(2)
    batch = Job.objects.claim_batch(owner="me", ttl=TTL, limit=10, clock=clock)
    stale = Lease(pk=jobs[0].pk, owner="me", fence=batch.fences[jobs[0].pk] - 1)  # an older fence: refused
    mine = Lease(pk=jobs[1].pk, owner="me", fence=batch.fences[jobs[1].pk])
    with CaptureQueriesContext(connection) as queries:
        landed = Job.objects.release_each_returning(
            [(stale, {"result": "stale"}), (mine, {"result": "done"})], ("result", "fence"), clock=clock
        )
    assert len(queries) == 1
    assert landed == {jobs[1].pk: {"result": "done", "fence": batch.fences[jobs[1].pk]}}
    assert Job.objects.release_each_returning([], ("result",), clock=clock) == {}

"""Each guard clause on its own refuses a write: 0 rows changed, the row exactly as before."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import Lease, LeaseLost

pytestmark = pytest.mark.django_db
TTL = 30


def snapshot(pk):
    return Job.objects.values().get(pk=pk)


@pytest.fixture
def held(clock):
    job = JobFactory(phase="step-1")
    lease = Job.objects.claim(job.pk, owner="worker-a", ttl=TTL, clock=clock)
    return job, lease


def assert_refused(lease, clock, **kwargs):
    before = snapshot(lease.pk)
    expect = kwargs.pop("expect", None)
    # The raw guarded statement: zero rows.
    assert Job.objects.held_by(lease, clock).filter(**(expect or {})).update(result="stale", writes=99) == 0
    with pytest.raises(LeaseLost):
        Job.objects.guarded_update(lease, clock=clock, expect=expect, result="stale", writes=99)
    assert snapshot(lease.pk) == before


def test_save__current_lease_lands(held, clock):
    job, lease = held
    Job.objects.guarded_update(lease, clock=clock, expect={"phase": "step-1"}, phase="step-2", result="ok")
    row = snapshot(job.pk)
    assert (row["phase"], row["result"], row["owner"], row["fence"]) == ("step-2", "ok", "worker-a", 1)


def test_save__wrong_owner_is_refused(held, clock):
    _, lease = held
    assert_refused(Lease(pk=lease.pk, owner="worker-b", fence=lease.fence), clock)


def test_save__stale_fence_with_same_owner_name_is_refused(held, clock):
    # The seed's "random name" luck: the same owner name at an older fence must not pass.
    job, first = held
    clock.advance(TTL + 1)
    second = Job.objects.claim(job.pk, owner="worker-a", ttl=TTL, clock=clock)
    assert second.fence == first.fence + 1
    assert_refused(first, clock)
    assert snapshot(job.pk)["fence"] == second.fence


def test_save__expired_lease_is_refused(held, clock):
    _, lease = held
    clock.advance(TTL)  # expiry is exclusive: at the instant of expiry the lease is gone
    assert_refused(lease, clock)


def test_save__wrong_phase_is_refused(held, clock):
    _, lease = held
    assert_refused(lease, clock, expect={"phase": "step-0"})


def test_lost_message_names_the_new_holder(held, clock):
    job, lease = held
    clock.advance(TTL + 1)
    Job.objects.claim(job.pk, owner="worker-b", ttl=TTL, clock=clock)
    with pytest.raises(LeaseLost) as caught:
        Job.objects.guarded_update(lease, clock=clock, result="stale")
    assert caught.value.holder == "worker-b"
    assert caught.value.holder_fence == 2
    assert "worker-b at fence 2" in str(caught.value)
    assert "worker-a at fence 1" in str(caught.value)
    assert caught.value.names_holder and not caught.value.row_gone


def test_lost__a_deleted_row_is_told_apart_from_a_takeover_without_reading_the_message(held, clock):
    job, lease = held
    Job.objects.filter(pk=job.pk).delete()
    with pytest.raises(LeaseLost) as caught:
        Job.objects.guarded_update(lease, clock=clock, result="stale")
    assert caught.value.row_gone and caught.value.holder is None and not caught.value.names_holder


def test_lost__a_row_that_moved_on_under_its_holder_does_not_name_the_holder_in_its_message(held, clock):
    _, lease = held
    with pytest.raises(LeaseLost) as caught:
        Job.objects.guarded_update(lease, clock=clock, expect={"phase": "step-0"}, result="x")
    assert caught.value.holder == "worker-a" and not caught.value.names_holder and not caught.value.row_gone


def test_lost_message_names_the_phase_it_found(held, clock):
    _, lease = held
    with pytest.raises(LeaseLost, match="phase='step-1' \\(expected 'step-0'\\)"):
        Job.objects.guarded_update(lease, clock=clock, expect={"phase": "step-0"}, result="x")


def test_guarded_update_is_one_statement(held, clock):
    _, lease = held
    with CaptureQueriesContext(connection) as queries:
        Job.objects.guarded_update(lease, clock=clock, result="ok")
    assert len(queries) == 1
    assert queries[0]["sql"].lstrip().upper().startswith("UPDATE")

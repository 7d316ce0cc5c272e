"""Re-opening a finished row: a new epoch (fence + 1), unowned, in one guarded statement."""

import pytest

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import LeaseBusy, LeaseLost, NotClaimable

pytestmark = pytest.mark.django_db
TTL = 30


def test_reopen__bumps_the_fence_and_refuses_every_older_lease(clock):
    job = JobFactory()
    old = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    Job.objects.release(old, clock=clock, state="failed", result="a's answer")

    assert Job.objects.filter(state="failed").reopen(job.pk, clock=clock, state="open") == 2

    row = Job.objects.values("state", "owner", "fence", "lease_expires_at", "result").get(pk=job.pk)
    assert row == {"state": "open", "owner": None, "fence": 2, "lease_expires_at": None, "result": "a's answer"}
    # The old lease matches no row: its write is refused and changes nothing.
    with pytest.raises(LeaseLost, match="fence 2"):
        Job.objects.guarded_update(old, clock=clock, result="stale")
    # The next claim is above the re-open's fence, and its write lands.
    new = Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=clock)
    assert new.fence == 3
    Job.objects.guarded_update(new, clock=clock, result="b's answer")
    assert Job.objects.get(pk=job.pk).result == "b's answer"


def test_reopen__a_live_lease_is_busy_and_untouched(clock):
    job = JobFactory(state="failed")
    Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    before = Job.objects.values().get(pk=job.pk)
    with pytest.raises(LeaseBusy, match="a holds it at fence 1"):
        Job.objects.filter(state="failed").reopen(job.pk, clock=clock, state="open")
    assert Job.objects.values().get(pk=job.pk) == before


def test_reopen__a_row_in_another_state_is_not_claimable_and_untouched(clock):
    job = JobFactory(state="done")
    with pytest.raises(NotClaimable):
        Job.objects.filter(state="failed").reopen(job.pk, clock=clock, state="open")
    assert Job.objects.values("state", "fence").get(pk=job.pk) == {"state": "done", "fence": 0}

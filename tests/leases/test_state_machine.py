"""Property-based: claims, renewals, guarded saves and clock moves across three workers on one row.

After every step: the fence never decreases, a save lands only for the current holder under a live
lease, and no save by a stale fence ever lands.
"""

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.leasetest.models import Job
from weave.leases import FakeClock, Lease, LeaseBusy, LeaseLost

TTL = 10.0
WORKERS = ("w1", "w2", "w3")


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.job = Job.objects.create()
        self.leases: dict[str, Lease] = {}
        self.last_fence = 0
        self.saves = 0

    def row(self) -> Job:
        return Job.objects.get(pk=self.job.pk)

    def holder_is_live(self, row: Job) -> bool:
        return row.owner is not None and row.lease_expires_at > self.clock.current

    @rule(worker=st.sampled_from(WORKERS))
    def claim(self, worker: str) -> None:
        before = self.row()
        try:
            lease = Job.objects.claim(self.job.pk, owner=worker, ttl=TTL, clock=self.clock)
        except LeaseBusy:
            assert self.holder_is_live(before)
            assert self.row().fence == before.fence
            return
        assert not self.holder_is_live(before)
        assert lease.fence == before.fence + 1
        self.leases[worker] = lease

    @rule(worker=st.sampled_from(WORKERS))
    def renew(self, worker: str) -> None:
        lease = self.leases.get(worker)
        if lease is None:
            return
        before = self.row()
        current = (before.owner, before.fence) == (lease.owner, lease.fence) and self.holder_is_live(before)
        try:
            Job.objects.renew(lease, ttl=TTL, clock=self.clock)
        except LeaseLost:
            assert not current
            assert self.row().lease_expires_at == before.lease_expires_at
            return
        assert current
        assert self.row().lease_expires_at == self.clock.current + timedelta(seconds=TTL)

    @rule(worker=st.sampled_from(WORKERS))
    def save(self, worker: str) -> None:
        lease = self.leases.get(worker)
        if lease is None:
            return
        before = self.row()
        current = (before.owner, before.fence) == (lease.owner, lease.fence) and self.holder_is_live(before)
        try:
            Job.objects.guarded_update(
                lease, clock=self.clock, result=f"{worker}@{lease.fence}", writes=before.writes + 1
            )
        except LeaseLost:
            assert not current, "a current, live holder was refused"
            after = self.row()
            assert (after.result, after.writes) == (before.result, before.writes), "a refused save changed the row"
            return
        assert current, f"a stale save landed: {worker} at fence {lease.fence}, row at fence {before.fence}"
        self.saves += 1

    @rule(seconds=st.floats(min_value=0.5, max_value=2 * TTL))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def fence_never_decreases(self) -> None:
        fence = self.row().fence
        assert fence >= self.last_fence
        self.last_fence = fence

    @invariant()
    def last_save_came_from_a_fence_that_held_the_row(self) -> None:
        row = self.row()
        if row.result:
            worker, fence = row.result.split("@")
            assert int(fence) <= row.fence


@pytest.mark.django_db
def test_lease_state_machine():
    LeaseMachine.TestCase.settings = settings(
        max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    LeaseMachine.TestCase().runTest()

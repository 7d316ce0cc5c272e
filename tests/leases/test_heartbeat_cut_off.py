"""A renewal that cannot reach the database fails the heartbeat, and that failure wins (issue 17)."""

import pytest
from django.db import OperationalError

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import Heartbeat, LeaseLost

TTL = 30.0


class _CutOffQueryset:
    """Stands for the lease queryset on a connection whose link went silent and then broke."""

    model = Job

    def __init__(self, real):
        self.real = real
        self.broken = False

    def renew(self, lease, **kwargs):
        if self.broken:
            raise OperationalError("terminating connection due to idle-in-transaction timeout")
        return self.real.renew(lease, **kwargs)


@pytest.mark.django_db
def test_heartbeat__database_error_is_a_failure_that_wins(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    queryset = _CutOffQueryset(Job.objects)
    with Heartbeat(queryset, lease, ttl=TTL, clock=clock, background=False) as hb:
        queryset.broken = True
        clock.advance(TTL / 3)
        hb.tick()  # kept, not raised: the work goes on until it checks
        assert hb.failed
        queryset.broken = False  # the link is back: a later renewal must not paper over the failure
        with pytest.raises(LeaseLost, match="database could not be reached") as raised:
            hb.before_save()
    assert isinstance(raised.value.__cause__, OperationalError)
    assert hb.renewals == [0.0]

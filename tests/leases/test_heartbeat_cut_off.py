"""A heartbeat that cannot reach the database never lets the work save as if the lease stood (issue 17).

Written to hold for any renewal policy after a database error (fail at once, or retry until the
lease's expiry): once the database stays unreachable past the expiry, `before_save()` raises
`LeaseLost` (or a subclass), and no later renewal papers over it.
"""

import pytest
from django.db import OperationalError

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import Heartbeat, LeaseLost

TTL = 30.0


class _CutOffManager:
    """Stands for the lease manager on a link that went silent and then broke."""

    model = Job

    def __init__(self) -> None:
        self.broken = False
        self.db = "default"

    def renew(self, lease, **kwargs):
        if self.broken:
            raise OperationalError("terminating connection due to idle-in-transaction timeout")
        return Job.objects.renew(lease, **kwargs)

    def __getattr__(self, name):  # anything else a heartbeat may use (e.g. db_for_write) goes to the real one
        return getattr(Job.objects, name)


@pytest.mark.django_db
def test_heartbeat__database_errors_past_the_expiry_fail_the_save(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    manager = _CutOffManager()
    with Heartbeat(manager, lease, ttl=TTL, clock=clock, background=False) as hb:
        manager.broken = True
        for _ in range(4):  # renewals due every ttl/3, each meeting the broken link
            clock.advance(TTL / 3)
            hb.tick()
        with pytest.raises(LeaseLost) as raised:
            hb.before_save()
        manager.broken = False  # the link is back: the failure still stands
        with pytest.raises(LeaseLost):
            hb.before_save()
    assert raised.value is not None
    assert hb.renewals == [0.0]  # nothing landed after the break

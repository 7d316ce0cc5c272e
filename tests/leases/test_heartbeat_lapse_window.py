"""When a heartbeat that meets database errors judges its lease lapsed (DESIGN §2.4).

The lease surely stands until the last landed renewal's start plus the TTL: not the claim's plus the
TTL (an attempt that has renewed for longer than one TTL would stop too early), and not later (a save
after that moment could land beside a new holder's).
"""

import threading

import pytest
from django.db import OperationalError

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import Heartbeat, LeaseLapsed

TTL = 30.0


class BreaksLater:
    """Job.objects whose renew() lands until `broken` is set, then raises a database error every time."""

    def __init__(self) -> None:
        self.broken = False
        self.model = Job
        self.db = "default"
        self.lock = threading.Lock()

    def renew(self, lease, **kwargs):
        with self.lock:
            if self.broken:
                raise OperationalError("could not receive data from server")
        return Job.objects.renew(lease, **kwargs)


def _run_for(hb, clock, seconds: float, step: float = 1.0) -> None:
    for _ in range(int(seconds / step)):
        clock.advance(step)
        hb.tick()


def test_heartbeat__lapse_is_judged_from_the_last_landed_renewal_after_more_than_one_ttl(clock, db):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    objects = BreaksLater()
    with Heartbeat(objects, lease, ttl=TTL, clock=clock, background=False) as hb:
        _run_for(hb, clock, 2 * TTL)  # two TTLs of healthy renewals: the claim's own expiry is long past
        last = hb.renewals[-1]
        assert last == 2 * TTL
        objects.broken = True
        _run_for(hb, clock, TTL - 1)  # every renewal now fails, but the last landed one still covers us
        assert hb.errors, "the failing renewals were not even tried"
        hb.check()  # must not raise: the lease stands until last + TTL
        _run_for(hb, clock, 1)  # now exactly last + TTL
        with pytest.raises(LeaseLapsed) as caught:
            hb.check()
    assert "No renewal landed before the lease expired" in str(caught.value)
    # The refusal is the heartbeat's own judgement; the row itself was never written by it.
    assert Job.objects.get(pk=job.pk).fence == lease.fence


def test_heartbeat__lapse_before_any_error_is_not_judged(clock, db):
    """Without a database error there is nothing to judge: a refusal comes only from the guard."""
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    with Heartbeat(BreaksLater(), lease, ttl=TTL, clock=clock, background=False) as hb:
        _run_for(hb, clock, 3 * TTL)
        hb.before_save()
    assert Job.objects.get(pk=job.pk).owner == "a"

"""Heartbeat timing on the fake clock, and once on a real PostgreSQL with real time."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import DatabaseClock, Heartbeat, LeaseBusy, LeaseLost

TTL = 30.0


def expiry(pk):
    return Job.objects.values_list("lease_expires_at", flat=True).get(pk=pk)


@pytest.mark.django_db
def test_heartbeat__renews_before_during_each_third_and_before_save(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(1)
    with Heartbeat(Job.objects, lease, ttl=TTL, clock=clock, background=False) as hb:
        assert hb.renewals == [1.0]  # before the work
        assert expiry(job.pk) == clock.current + timedelta(seconds=TTL)
        clock.advance(9.9)
        assert hb.tick() is False  # not yet a third of the ttl
        clock.advance(0.1)
        assert hb.tick() is True
        clock.advance(10)
        assert hb.tick() is True
        clock.advance(4)
        hb.before_save()
        assert hb.renewals == [1.0, 11.0, 21.0, 25.0]
        assert expiry(job.pk) == clock.current + timedelta(seconds=TTL)


@pytest.mark.django_db
def test_heartbeat__renews_every_heartbeat_interval_when_the_setting_is_set(clock, settings):
    settings.WEAVE = {"HEARTBEAT_INTERVAL": 4}
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    with Heartbeat(Job.objects, lease, ttl=TTL, clock=clock, background=False) as hb:
        assert hb.interval == 4
        clock.advance(3.9)
        assert hb.tick() is False
        clock.advance(0.1)
        assert hb.tick() is True
        clock.advance(4)
        assert hb.tick() is True
        assert hb.renewals == [0.0, 4.0, 8.0]


@pytest.mark.django_db
def test_heartbeat__never_waits_longer_than_a_third_of_its_ttl(clock, settings):
    # A TTL passed in by hand is not covered by weave.E010; the interval still leaves room for a late renewal.
    settings.WEAVE = {"HEARTBEAT_INTERVAL": 20}
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    with Heartbeat(Job.objects, lease, ttl=TTL, clock=clock, background=False) as hb:
        assert hb.interval == TTL / 3


@pytest.mark.django_db
def test_heartbeat__failed_renewal_wins_even_if_work_succeeds(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    with Heartbeat(Job.objects, lease, ttl=TTL, clock=clock, background=False) as hb:
        # Someone steals the row mid-work (as from psql: new owner, fence + 1, future expiry).
        Job.objects.filter(pk=job.pk).update(owner="thief", fence=lease.fence + 1)
        clock.advance(TTL / 3)
        hb.tick()
        work_result = "fine"  # the slow work itself returned normally
        with pytest.raises(LeaseLost, match="thief at fence 2"):
            hb.before_save()
    assert work_result == "fine"
    assert hb.failed
    # No further renewal is attempted once one has failed.
    assert hb.renewals == [0.0]


@pytest.mark.django_db
def test_heartbeat__stops_renewing_when_budget_is_spent(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    with Heartbeat(Job.objects, lease, ttl=TTL, clock=clock, budget=25, background=False) as hb:
        for _ in range(6):
            clock.advance(TTL / 3)
            hb.tick()
        assert hb.budget_spent
        assert hb.renewals == [0.0, 10.0, 20.0]
    # The lease then runs out on its own: 20 s + ttl after the start.
    assert expiry(job.pk) == clock.current - timedelta(seconds=60) + timedelta(seconds=20 + TTL)


@pytest.mark.django_db
def test_heartbeat__lapsed_lease_is_not_renewed_on_enter(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    clock.advance(TTL + 1)
    with pytest.raises(LeaseLost, match="expired"):
        with Heartbeat(Job.objects, lease, ttl=TTL, clock=clock, background=False):
            pass


@pytest.mark.django_db(transaction=True)
def test_heartbeat__background_thread_follows_the_fake_clock(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    with Heartbeat(Job.objects, lease, ttl=TTL, clock=clock) as hb:
        for expected in (2, 3, 4):
            clock.advance(TTL / 3)
            deadline = time.monotonic() + 10  # real time only bounds the wait for the thread
            while len(hb.renewals) < expected and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(hb.renewals) == expected
    assert hb.renewals == [0.0, 10.0, 20.0, 30.0]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_heartbeat__real_time_on_postgres_keeps_a_short_lease_alive():
    # The design's one real-time lease test. A renewal every TTL / 3 = 1 s leaves a renewal 2 s to be
    # late before the lease could lapse: a margin a loaded 2-core machine does not eat.
    ttl = 3.0
    real = DatabaseClock()
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=ttl, clock=real)
    with Heartbeat(Job.objects, lease, ttl=ttl, clock=real) as hb:
        time.sleep(2.5 * ttl)  # slow work, far longer than one lease
        # Outlived its first expiry by the database clock, yet still held.
        assert Job.objects.values_list("lease_expires_at", flat=True).get(pk=job.pk) > lease.expires_at
        with pytest.raises(LeaseBusy):
            Job.objects.claim(job.pk, owner="b", ttl=ttl, clock=real)
        hb.before_save()
        Job.objects.guarded_update(lease, clock=real, result="saved")
    assert len(hb.renewals) >= 4
    assert Job.objects.get(pk=job.pk).result == "saved"
    # The heartbeat thread closed its own connection.
    assert not any(t.name.startswith("heartbeat-") for t in threading.enumerate())
    assert connection.vendor == "postgresql"

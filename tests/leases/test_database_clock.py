"""Expiry comes from the database clock: the worker's own clock, pushed hours away, changes nothing."""

import time
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db.models import DateTimeField, ExpressionWrapper
from django.utils import timezone

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import DatabaseClock, DbNow, LeaseBusy, LeaseLost

pytestmark = pytest.mark.django_db
real = DatabaseClock()
TTL = 30.0  # long enough that no delay on a loaded machine lapses a lease this test expects live


def db_now():
    return Job.objects.annotate(t=ExpressionWrapper(DbNow(), output_field=DateTimeField())).values_list("t", flat=True)[
        0
    ]


def wait_until_the_database_passes(instant, seconds=30.0):
    """Wait (bounded) until the database clock is past `instant`: an event on its clock, not a margin."""
    deadline = time.monotonic() + seconds
    while db_now() <= instant:
        assert time.monotonic() < deadline, "the database clock did not reach the expiry"
        time.sleep(0.01)


@pytest.mark.parametrize("shift_hours", [-5, 7])
def test_claim_renew_expiry_follow_the_database_clock_not_python(shift_hours):
    job = JobFactory()
    true_now = datetime.now(UTC)
    with time_machine.travel(true_now + timedelta(hours=shift_hours), tick=True):
        assert abs((timezone.now() - true_now).total_seconds() - shift_hours * 3600) < 60
        lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=real)
        job.refresh_from_db()
        server_now = db_now()
        # The expiry is the database's now plus the TTL, hours away from what Python believes.
        assert timedelta(0) < job.lease_expires_at - server_now <= timedelta(seconds=TTL)
        assert abs((server_now - true_now).total_seconds()) < 60
        with pytest.raises(LeaseBusy):
            Job.objects.claim(job.pk, owner="b", ttl=TTL, clock=real)
        Job.objects.renew(lease, ttl=TTL, clock=real)
        renewed = Job.objects.values_list("lease_expires_at", flat=True).get(pk=job.pk)
        assert renewed > job.lease_expires_at

        # A short lease on a second job lapses by the database clock alone (Python's is hours off).
        short = JobFactory()
        brief = Job.objects.claim(short.pk, owner="a", ttl=0.05, clock=real)
        wait_until_the_database_passes(brief.expires_at)
        with pytest.raises(LeaseLost, match="expired"):
            Job.objects.renew(brief, ttl=TTL, clock=real)
        assert Job.objects.claim(short.pk, owner="b", ttl=TTL, clock=real).fence == 2

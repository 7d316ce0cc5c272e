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


def db_now():
    return Job.objects.annotate(t=ExpressionWrapper(DbNow(), output_field=DateTimeField())).values_list("t", flat=True)[
        0
    ]


@pytest.mark.parametrize("shift_hours", [-5, 7])
def test_claim_renew_expiry_follow_the_database_clock_not_python(shift_hours):
    job = JobFactory()
    true_now = datetime.now(UTC)
    with time_machine.travel(true_now + timedelta(hours=shift_hours), tick=True):
        assert abs((timezone.now() - true_now).total_seconds() - shift_hours * 3600) < 60
        lease = Job.objects.claim(job.pk, owner="a", ttl=0.5, clock=real)
        job.refresh_from_db()
        server_now = db_now()
        # The expiry is half a second after the database's now, whatever Python believes.
        assert timedelta(0) < job.lease_expires_at - server_now <= timedelta(seconds=0.5)
        assert abs((server_now - true_now).total_seconds()) < 60
        with pytest.raises(LeaseBusy):
            Job.objects.claim(job.pk, owner="b", ttl=0.5, clock=real)
        Job.objects.renew(lease, ttl=0.5, clock=real)
        time.sleep(0.7)
        with pytest.raises(LeaseLost, match="expired"):
            Job.objects.renew(lease, ttl=0.5, clock=real)
        assert Job.objects.claim(job.pk, owner="b", ttl=0.5, clock=real).fence == 2

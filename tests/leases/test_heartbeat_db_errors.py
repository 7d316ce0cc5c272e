"""A renewal that fails with a database error is retried and logged; only a guard refusal loses the lease."""

import logging
import threading

import pytest
from django.db import OperationalError

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import Heartbeat, LeaseLapsed, LeaseLost

TTL = 30.0


class Flaky:
    """Job.objects whose renew() raises a database error while `failing` is positive (one per call)."""

    def __init__(self, failing: int) -> None:
        self.failing = failing
        self.calls = 0
        self.model = Job
        self.db = "default"
        self.lock = threading.Lock()

    def renew(self, lease, **kwargs):
        with self.lock:
            self.calls += 1
            if self.failing:
                self.failing -= 1
                raise OperationalError("server closed the connection unexpectedly\nevent=forged")
        return Job.objects.renew(lease, **kwargs)


def test_heartbeat__a_database_error_is_retried_on_a_fresh_connection_and_logged(clock, caplog, db):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    flaky = Flaky(failing=1)
    with caplog.at_level(logging.WARNING, logger="weave.leases"):
        # The test transaction is open, so no reconnect on this thread: the retry comes at the next beat.
        with Heartbeat(flaky, lease, ttl=TTL, clock=clock, background=False) as hb:
            assert hb.renewals == [] and not hb.failed  # the error did not count as losing the lease
            clock.advance(5)
            assert hb.tick() is True  # due again soon after a failed renewal, not a whole interval later
            assert hb.renewals == [5.0]
            hb.before_save()  # lands: the save may go ahead
    assert "event=renewal_retry" in caplog.text and "OperationalError" in caplog.text
    assert "\nevent=forged" not in caplog.text  # the database's message is one escaped line
    assert Job.objects.get(pk=job.pk).owner == "a"


def test_heartbeat__no_renewal_before_the_expiry_stops_the_attempt_before_its_save(clock, db):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    flaky = Flaky(failing=1000)
    with Heartbeat(flaky, lease, ttl=TTL, clock=clock, background=False) as hb:
        for _ in range(5):
            clock.advance(5)
            hb.tick()
            hb.check()  # still within the ttl: the lease stands, no refusal yet
        clock.advance(TTL)
        hb.tick()
        with pytest.raises(LeaseLapsed) as caught:
            hb.before_save()
    assert isinstance(caught.value, LeaseLost)  # the runner treats it as a lost lease: no save
    assert "No renewal landed before the lease expired" in str(caught.value)
    assert "OperationalError" in str(caught.value)


@pytest.mark.django_db(transaction=True)
def test_heartbeat__the_background_thread_survives_a_database_error(clock):
    job = JobFactory()
    lease = Job.objects.claim(job.pk, owner="a", ttl=TTL, clock=clock)
    flaky = Flaky(failing=0)
    with Heartbeat(flaky, lease, ttl=TTL, clock=clock) as hb:
        flaky.failing = 1  # the next background renewal meets a database error
        clock.advance(TTL / 3)
        _wait(lambda: flaky.calls >= 3)  # the failure, the retry on a fresh connection
        assert hb._thread is not None and hb._thread.is_alive(), "the heartbeat thread died"
        clock.advance(TTL / 3)
        _wait(lambda: len(hb.renewals) >= 3)
        assert not hb.failed
        hb.before_save()


def _wait(condition, rounds: int = 400):
    event = threading.Event()
    for _ in range(rounds):  # bounded: at most ~20 s of real time
        if condition():
            return
        event.wait(0.05)
    raise AssertionError("condition not reached")

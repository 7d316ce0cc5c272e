"""The job runner's promises at its edges: an operator's retry starts over, and a lost lease outranks the
job's own error (DESIGN §2.5: losing is an outcome, recorded as blocked, and nothing else is written)."""

import pytest

from tests.jobs.shipping.carrier import carrier, during_booking
from tests.jobs.shipping.models import Booking, Shipment
from weave.jobs import Fail
from weave.jobs.runner import run_job
from weave.jobs.services import job_retry
from weave.models import JobAttempt, JobStepReceipt

pytestmark = pytest.mark.django_db
TTL = 30


def receipts(shipment):
    rows = JobStepReceipt.objects.filter(job_id=str(shipment.pk)).order_by("pk")
    return list(rows.values_list("epoch", "step", "result"))


def test_retry__an_operators_retry_reruns_every_step_instead_of_reading_the_old_epochs_receipts(clock):
    shipment = Shipment.objects.create(parcel="books")

    def refused(ctx, hb):
        raise Fail("the carrier refused the parcel")

    during_booking.append(refused)
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "failed"
    during_booking.clear()
    assert [r[:2] for r in receipts(shipment)] == [(0, "quote")]  # epoch 0 got as far as its quote

    # The operator fixes the parcel and retries: a new epoch, whose quote must be the new parcel's.
    Shipment.objects.filter(pk=shipment.pk).update(parcel="a much heavier parcel")
    assert job_retry(job_type="shipment", pks=[shipment.pk], clock=clock).changed == [shipment.pk]
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"

    new_quote = carrier.quote("a much heavier parcel")
    assert receipts(shipment) == [
        (0, "quote", {"cents": carrier.quote("books")}),
        (1, "quote", {"cents": new_quote}),
        (1, "book", {"carrier_ref": receipts(shipment)[2][2]["carrier_ref"]}),
    ]
    assert list(carrier.charges.values())[-1] == new_quote  # charged the new quote, not epoch 0's


def test_run__the_jobs_own_error_after_its_lease_was_lost_is_recorded_as_blocked_not_failed(clock):
    shipment = Shipment.objects.create(parcel="books")

    def stall_steal_then_fail(ctx, hb):
        during_booking.remove(stall_steal_then_fail)
        hb.stop()  # the worker stalls, heartbeat included
        clock.advance(TTL + 1)
        Shipment.objects.claim(shipment.pk, owner="rival", ttl=TTL, clock=clock)
        raise ConnectionError("carrier unreachable")  # the stale worker's own error, after it lost

    during_booking.append(stall_steal_then_fail)
    assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"

    row = Shipment.objects.values("owner", "fence", "state", "last_error", "next_attempt_at").get(pk=shipment.pk)
    # The new holder's row is untouched: no failed state, no error text, no retry time from the stale worker.
    assert row == {"owner": "rival", "fence": 2, "state": "pending", "last_error": "", "next_attempt_at": None}
    attempt = JobAttempt.objects.get(job_id=str(shipment.pk), owner="stale")
    assert attempt.outcome == "blocked" and "rival" in attempt.reason
    assert JobAttempt.objects.filter(job_id=str(shipment.pk)).exclude(outcome="blocked").count() == 0
    assert Booking.objects.count() == 0

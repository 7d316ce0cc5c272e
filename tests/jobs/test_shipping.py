"""A site's own fenced job (tests/jobs/shipping): claims, steps with receipts, resume, refusals, actions."""

import pytest

from tests.jobs.shipping.carrier import carrier, during_booking
from tests.jobs.shipping.models import Booking, Shipment
from weave.explain import explainers
from weave.jobs.runner import run_job
from weave.jobs.services import job_cancel, job_retry, job_start
from weave.models import JobAttempt, JobStepReceipt

pytestmark = pytest.mark.django_db
TTL = 30


def steps_of(shipment):
    return list(JobStepReceipt.objects.filter(job_id=str(shipment.pk)).order_by("pk").values_list("step", "attempt"))


def outcomes(shipment):
    return list(JobAttempt.objects.filter(job_id=str(shipment.pk)).order_by("number").values_list("outcome", flat=True))


def test_run__walks_the_steps_and_finishes_under_the_lease(clock):
    shipment = Shipment.objects.create(parcel="books")
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "done"
    shipment.refresh_from_db()
    assert (shipment.state, shipment.attempts, shipment.owner, shipment.fence) == ("done", 1, None, 1)
    assert steps_of(shipment) == [("quote", 1), ("book", 1)]
    assert Booking.objects.get().written_by == "w1"
    assert outcomes(shipment) == ["done"]
    assert list(carrier.charges.values()) == [550]


def test_run__a_failed_step_resumes_from_its_receipts_with_the_same_key(clock):
    shipment = Shipment.objects.create(parcel="books")

    def carrier_down(ctx, hb):
        raise ConnectionError("carrier unreachable")

    during_booking.append(carrier_down)
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "retry"
    shipment.refresh_from_db()
    assert shipment.state == "pending" and "carrier unreachable" in shipment.last_error
    assert shipment.next_attempt_at > clock.current  # backoff, by the clock
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "not due"
    during_booking.clear()
    clock.advance(60)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    # The quote was not run again: its receipt from attempt 1 was read back.
    assert steps_of(shipment) == [("quote", 1), ("book", 2)]
    assert outcomes(shipment) == ["retry", "done"]
    # Both attempts called the carrier with one key: it charged once.
    assert len(carrier.calls) == 2 and len(set(carrier.calls)) == 1 and len(carrier.charges) == 1


@pytest.mark.postgres
def test_run__a_lease_stolen_mid_step_refuses_the_stale_write_and_keeps_the_new_owners(clock):
    """The stale worker stalls inside its slow call; its lease runs out and a rival takes the job over."""
    shipment = Shipment.objects.create(parcel="books")
    rival = {}

    def stall_and_steal(ctx, hb):
        during_booking.remove(stall_and_steal)  # once: the rival's own booking call runs undisturbed
        hb.stop()  # the whole process stalls: its heartbeat thread too
        clock.advance(TTL + 1)
        rival["outcome"] = run_job("shipment", shipment.pk, owner="rival", clock=clock)
        rival["row"] = Shipment.objects.values("owner", "fence", "state").get(pk=shipment.pk)

    during_booking.append(stall_and_steal)
    assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"
    # The rival ran the whole job under fence 2.
    assert rival["outcome"] == "done"
    after = Shipment.objects.values("owner", "fence", "state", "attempts").get(pk=shipment.pk)
    assert after == {"owner": None, "fence": 2, "state": "done", "attempts": 2}
    # The stale worker's domain write did not land: one booking, the rival's.
    assert list(Booking.objects.values_list("written_by", flat=True)) == ["rival"]
    assert steps_of(shipment) == [("quote", 1), ("book", 2)]  # the stale attempt's quote, the rival's booking
    blocked = JobAttempt.objects.get(job_id=str(shipment.pk), owner="stale")
    assert blocked.outcome == "blocked" and "fence 2 took the row over" in blocked.reason
    assert blocked.reason.endswith("It was taken over by rival.")  # the job is free by now: its taker is named
    assert outcomes(shipment) == ["blocked", "done"]
    assert len(carrier.charges) == 1  # both asked the carrier under one key


def test_run__a_refused_job_fails_with_its_reason_and_retry_starts_a_new_epoch(clock):
    shipment = Shipment.objects.create(parcel="")
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "failed"
    shipment.refresh_from_db()
    assert shipment.state == "failed" and shipment.last_error == "Fail: no parcel to ship (at step quote)"
    Shipment.objects.filter(pk=shipment.pk).update(parcel="books")
    assert job_retry(job_type="shipment", pks=[shipment.pk], clock=clock).changed == [shipment.pk]
    shipment.refresh_from_db()
    assert (shipment.state, shipment.epoch, shipment.fence) == ("pending", 1, 2)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    assert carrier.calls[0].startswith(f"shipment:{shipment.pk}:1:")  # the new epoch's key


def test_cancel__a_live_lease_is_busy_and_a_free_job_is_cancelled(clock):
    shipment = Shipment.objects.create(parcel="books")
    Shipment.objects.claim(shipment.pk, owner="worker", ttl=TTL, clock=clock)
    assert job_cancel(job_type="shipment", pks=[shipment.pk], clock=clock).busy == [shipment.pk]
    assert Shipment.objects.get(pk=shipment.pk).state == "pending"
    clock.advance(TTL + 1)
    assert job_cancel(job_type="shipment", pks=[shipment.pk], clock=clock).changed == [shipment.pk]
    assert Shipment.objects.get(pk=shipment.pk).state == "cancelled"
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "not due"


def test_start__makes_a_waiting_job_due_now(clock, django_capture_on_commit_callbacks):
    from django_q.models import OrmQ

    shipment = Shipment.objects.create(parcel="books", next_attempt_at=clock.current.replace(year=2099))
    with django_capture_on_commit_callbacks(execute=True):
        assert job_start(job_type="shipment", pks=[shipment.pk]).changed == [shipment.pk]
    assert Shipment.objects.get(pk=shipment.pk).next_attempt_at is None
    assert OrmQ.objects.count() == 1


def test_explain__tells_the_attempts_steps_and_holder(clock):
    shipment = Shipment.objects.create(parcel="books")
    run_job("shipment", shipment.pk, owner="w1", clock=clock)
    text = explainers()["shipment"](shipment.pk).as_text()
    assert "step quote saved by fence 1 (w1)" in text and "attempt 1 (fence 1)" in text
    assert "nobody holds it (fence 1); state done" in text


def test_run__the_stale_write_is_refused_while_the_new_owner_still_holds_the_job(clock):
    shipment = Shipment.objects.create(parcel="books")

    def stall_and_claim(ctx, hb):
        hb.stop()
        clock.advance(TTL + 1)
        lease = Shipment.objects.claim(shipment.pk, owner="rival", ttl=TTL, clock=clock)
        Shipment.objects.guarded_update(lease, clock=clock, price_cents=999)  # the new owner's own write

    during_booking.append(stall_and_claim)
    assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"
    row = Shipment.objects.values("owner", "fence", "price_cents", "state").get(pk=shipment.pk)
    assert row == {"owner": "rival", "fence": 2, "price_cents": 999, "state": "pending"}
    assert not Booking.objects.exists()
    assert not JobStepReceipt.objects.filter(job_id=str(shipment.pk), step="book").exists()
    reason = JobAttempt.objects.get(job_id=str(shipment.pk)).reason
    assert "now held by rival at fence 2" in reason


def test_run__a_job_that_used_up_its_attempts_says_so_in_its_reason_and_story(clock):
    """Failed after its last attempt: the reason says no retry is left, so the operator need not guess whether
    the error itself was final; a `Fail` needs no such words (its own are the reason)."""
    shipment = Shipment.objects.create(parcel="books")

    def carrier_down(ctx, hb):
        raise ConnectionError("carrier unreachable")

    during_booking.append(carrier_down)
    for owner in ("w1", "w2"):
        assert run_job("shipment", shipment.pk, owner=owner, clock=clock) == "retry"
        clock.advance(60)
    assert run_job("shipment", shipment.pk, owner="w3", clock=clock) == "failed"
    shipment.refresh_from_db()
    said = "Not retried: that was attempt 3 and the retry policy allows 3."
    assert shipment.last_error == f"ConnectionError: carrier unreachable (at step book). {said}"
    retried = JobAttempt.objects.filter(job_id=str(shipment.pk), outcome="retry").values_list("reason", flat=True)
    assert all("Not retried" not in reason for reason in retried) and len(retried) == 2
    assert said in explainers()["shipment"](shipment.pk).as_text()

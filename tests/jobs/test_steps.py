"""The one step protocol (`weave.jobs.Step`) and the step walk the core runner and onboarding share."""

import pytest

from tests.jobs.shipping.models import Booking, Shipment
from weave.jobs import Fail, JobType, PhaseError, Step, claim, phase_before, steps_after, undo_steps
from weave.jobs.runner import work
from weave.models import JobStepReceipt

TTL = 30
PLAN = (Step("quote"), Step("book"), Step("notify"))


def test_steps_after__a_phase_is_the_last_saved_step_and_the_walk_resumes_after_it():
    assert [s.name for s in steps_after(PLAN, "")] == ["quote", "book", "notify"]
    assert [s.name for s in steps_after(PLAN, "book")] == ["notify"]
    assert steps_after(PLAN, "notify") == []
    with pytest.raises(PhaseError, match="The job is at phase 'gone', which its plan does not have."):
        steps_after(PLAN, "gone")


def test_phase_before__a_save_expects_the_previous_steps_phase():
    assert [phase_before(PLAN, s.name) for s in PLAN] == ["", "quote", "book"]
    with pytest.raises(PhaseError, match="Step gone is not in the run's plan."):
        phase_before(PLAN, "gone", noun="run")


def test_undo_steps__newest_first_skipping_steps_without_undo_and_stopping_at_the_first_failure():
    undone: list[str] = []

    def undo(ctx, result):
        undone.append(result)

    def refuse(ctx, result):
        raise Fail("the carrier keeps the booking")

    plan = (Step("quote", undo=undo), Step("book", undo=refuse), Step("notify"), Step("label", undo=undo))
    saved = ["label", "notify", "book", "quote"]  # receipts, newest first
    walk = undo_steps(
        plan,
        saved,
        lambda step, receipt: step.undo(None, receipt),
        name_of=str,
        budget_left=lambda: 1.0,
        failures=(Fail,),
    )
    assert (walk.undone, walk.left, walk.stopped, walk.failed_step) == (["label"], ["notify"], "failed", "book")
    assert undone == ["label"] and isinstance(walk.error, Fail)


def test_undo_steps__a_spent_budget_stops_before_the_next_undo():
    plan = (Step("quote", undo=lambda ctx, r: None), Step("book", undo=lambda ctx, r: None))
    budget = iter([1.0, 0.0])
    walk = undo_steps(
        plan, ["book", "quote"], lambda s, r: None, name_of=str, budget_left=lambda: next(budget), failures=()
    )
    assert (walk.undone, walk.stopped) == (["book"], "budget")


@pytest.mark.django_db
def test_run__a_later_steps_check_fails_the_attempt_before_any_step_runs(clock):
    ran: list[str] = []

    def no_label(ctx):
        raise Fail("no label printer for this parcel")

    steps = (
        Step("quote", lambda ctx: ran.append("quote")),
        Step("label", lambda ctx: ran.append("label"), check=no_label),
    )
    shipment = Shipment.objects.create(parcel="books")
    ctx = claim("shipment", Shipment.objects.due(clock), shipment.pk, owner="w1", ttl=TTL, clock=clock)
    ctx.job = Shipment.objects.get(pk=shipment.pk)

    ending = work(JobType(name="shipment", model=Shipment, steps=steps), ctx)

    assert ending.outcome == "failed" and "no label printer" in ending.reason and "at step label" in ending.reason
    assert ran == [] and not JobStepReceipt.objects.exists()


@pytest.mark.django_db
def test_run__what_save_returns_is_the_receipt_and_the_next_steps_result(clock):
    def book(ctx, result):
        row = Booking.objects.create(shipment_id=ctx.lease.pk, carrier_ref=result["ref"], written_by=ctx.lease.owner)
        return {**result, "booking": row.pk}

    seen: list[object] = []
    steps = (
        Step("book", lambda ctx: {"ref": "C-1"}, save=book),
        Step("notify", lambda ctx: seen.append(dict(ctx.results))),
    )
    shipment = Shipment.objects.create(parcel="books")
    ctx = claim("shipment", Shipment.objects.due(clock), shipment.pk, owner="w1", ttl=TTL, clock=clock)
    ctx.job = Shipment.objects.get(pk=shipment.pk)

    assert work(JobType(name="shipment", model=Shipment, steps=steps), ctx).outcome == "done"

    booking = Booking.objects.get()
    receipt = JobStepReceipt.objects.get(step="book")
    assert receipt.result == {"ref": "C-1", "booking": booking.pk}
    assert seen == [{"book": {"ref": "C-1", "booking": booking.pk}}]

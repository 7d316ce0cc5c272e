"""The shipment job's steps: quote, then book and charge (with the step's idempotency key)."""

from typing import Any

from tests.jobs.shipping.carrier import carrier, during_booking
from tests.jobs.shipping.models import Booking
from weave.jobs import Fail, JobContext


def quote(ctx: JobContext) -> dict[str, Any]:
    if not ctx.job.parcel:
        raise Fail("no parcel to ship")
    return {"cents": carrier.quote(ctx.job.parcel)}


def book(ctx: JobContext) -> dict[str, Any]:
    with ctx.heartbeat() as hb:  # a slow external call: keep the lease alive while it runs
        cents = ctx.results["quote"]["cents"]
        ref = carrier.book_and_charge(key=ctx.idempotency_key, parcel=ctx.job.parcel, cents=cents)
        for hook in during_booking:
            hook(ctx, hb)
        hb.check()  # a renewal that failed wins, even if the call looks fine
    return {"carrier_ref": ref}


def record_booking(ctx: JobContext, result: dict[str, Any]) -> None:
    # Runs inside the guarded transaction, after the guarded update: a stale worker never gets here.
    Booking.objects.create(shipment_id=ctx.lease.pk, carrier_ref=result["carrier_ref"], written_by=ctx.lease.owner)

"""`@task` functions of the example site: they write to its own models and charge the fake carrier."""

from tests.jobs.shipping.carrier import carrier, during_booking
from tests.jobs.shipping.models import Booking, Shipment
from weave.tasks.compat import task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def explode() -> None:
    raise ValueError("no such parcel")


@task()
def refused(token: str) -> None:
    raise PermissionError(f"the gateway refused our token {token}")


@task(takes_context=True, priority=5)
def charge_and_book(context, shipment_id: int) -> str:
    shipment = Shipment.objects.get(pk=shipment_id)
    with context.heartbeat() as hb:
        ref = carrier.book_and_charge(key=context.idempotency_key, parcel=shipment.parcel, cents=500)
        for hook in during_booking:
            hook(context, hb)
        hb.check()
    with context.guarded():  # the guarded update first, then the site's own write
        Booking.objects.create(shipment=shipment, carrier_ref=ref, written_by=context.lease.owner)
    return ref

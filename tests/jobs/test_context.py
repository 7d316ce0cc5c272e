"""`weave.jobs.claim()` and the JobContext a self-driven attempt writes through (expect, renew, release)."""

import pytest

from tests.jobs.shipping.models import Booking, Shipment
from weave import jobs
from weave.leases import LeaseLost

pytestmark = pytest.mark.django_db
TTL = 30


def claim(pk, owner, clock, **options):
    return jobs.claim("shipment", Shipment.objects.pending(), pk, owner=owner, ttl=TTL, clock=clock, **options)


def test_claim__opens_a_context_at_a_new_fence_with_the_claims_database_time(clock):
    shipment = Shipment.objects.create(parcel="books")
    ctx = claim(shipment.pk, "w1", clock, budget=40)
    assert (ctx.lease.owner, ctx.lease.fence, ctx.job, ctx.model) == ("w1", 1, None, Shipment)
    assert ctx.claimed_at == clock.current
    assert ctx.still_held() and ctx.budget_left() == 40
    clock.advance(15)
    assert ctx.budget_left() == 25


def test_guarded__expect_refuses_a_row_that_moved_on_and_nothing_inside_lands(clock):
    shipment = Shipment.objects.create(parcel="books")
    ctx = claim(shipment.pk, "w1", clock)
    with pytest.raises(LeaseLost), ctx.guarded(expect={"parcel": "shoes"}, price_cents=1):
        Booking.objects.create(shipment=shipment, carrier_ref="X", written_by="w1")
    assert not Booking.objects.exists()
    shipment.refresh_from_db()
    assert shipment.price_cents is None


def test_guarded__renew_false_leaves_the_expiry_where_it_was(clock):
    shipment = Shipment.objects.create(parcel="books")
    ctx = claim(shipment.pk, "w1", clock)
    expiry = Shipment.objects.get().lease_expires_at
    clock.advance(10)
    with ctx.guarded(renew=False, price_cents=5):
        pass
    assert Shipment.objects.get().lease_expires_at == expiry
    with ctx.guarded(price_cents=6):
        pass
    assert Shipment.objects.get().lease_expires_at > expiry


def test_a_stale_context__its_writes_are_refused_and_its_reason_names_the_new_holder(clock):
    shipment = Shipment.objects.create(parcel="books")
    stale = claim(shipment.pk, "stale", clock)
    clock.advance(TTL + 1)
    assert not stale.still_held()
    fresh = claim(shipment.pk, "fresh", clock)
    with pytest.raises(LeaseLost) as lost, stale.guarded(price_cents=1):
        Booking.objects.create(shipment=shipment, carrier_ref="late", written_by="stale")
    reason = stale.blocked_reason(lost.value, "at the save")
    assert reason.startswith("Lease lost at the save:") and "fresh" in reason and "fence 2" in reason
    with pytest.raises(LeaseLost):
        stale.release(state="done")
    fresh.release(state="done")
    assert not Booking.objects.exists()
    assert Shipment.objects.values_list("state", "owner", "fence").get() == ("done", None, 2)


def test_database_time__reads_the_due_time_off_the_database_clock(clock):
    shipment = Shipment.objects.create(parcel="books")
    ctx = claim(shipment.pk, "w1", clock)
    assert (ctx.database_time(90) - clock.current).total_seconds() == 90

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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_guarded__a_save_that_passed_its_guard_holds_a_takeover_off_until_it_commits(clock):
    """Real PostgreSQL row locks: the guarded update's lock refuses a rival's claim until the block commits."""
    import threading

    from django.db import connection

    from weave.leases import LeaseBusy

    shipment = Shipment.objects.create(parcel="books")
    ctx = claim(shipment.pk, "w1", clock)
    rival: dict[str, object] = {}

    def take_over() -> None:
        try:
            rival["fence"] = claim(shipment.pk, "rival", clock).lease.fence
        except LeaseBusy as busy:
            rival["busy"] = str(busy)
        finally:
            connection.close()

    with ctx.guarded(renew=False, price_cents=7):
        Booking.objects.create(shipment=shipment, carrier_ref="R1", written_by="w1")
        clock.advance(TTL + 1)  # the lease has run out, but this transaction already holds the row
        thread = threading.Thread(target=take_over)
        thread.start()
        thread.join(30)
    assert "busy" in rival and "fence" not in rival
    # Committed before the takeover: the write and the booking landed, and the next claim gets fence 2.
    assert Shipment.objects.values_list("price_cents", "fence").get() == (7, 1)
    assert claim(shipment.pk, "rival", clock).lease.fence == 2
    assert list(Booking.objects.values_list("written_by", flat=True)) == ["w1"]

"""What a step's parts and a handler may be: coroutine functions for the slow parts (run to their end by
the worker), plain functions for `save` and `undo` (inside the guarded transaction, on the worker's
connection), and in every case able to take the arguments they are called with, or refused at start.
"""

import asyncio
import threading
from dataclasses import replace

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured

from tests.jobs.shipping.models import Booking, Shipment
from weave.jobs import JobType, Step, declaration, register
from weave.jobs.batch import run_batches
from weave.jobs.runner import run_job
from weave.jobs.services import job_cancel
from weave.models import JobAttempt, JobStepReceipt

pytestmark = pytest.mark.django_db

seen: list[tuple[str, bool]] = []  # (part, whether it ran inside a running event loop)


def in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def quote(ctx):
    await asyncio.sleep(0)  # a real await: the coroutine is driven, not only created
    seen.append(("quote", in_loop()))
    return {"cents": 700}


async def check_parcel(ctx):
    seen.append(("check", in_loop()))


def record_booking(ctx, result):
    seen.append(("save", in_loop()))
    Booking.objects.create(shipment_id=ctx.lease.pk, carrier_ref=f"CR-{result['cents']}", written_by=ctx.lease.owner)


async def cancel_at_carrier(ctx, result):
    await asyncio.sleep(0)
    seen.append(("undo_run", in_loop()))
    return {"refund": result["cents"]}


def delete_booking(ctx, value):
    seen.append((f"undo {value['refund']}", in_loop()))
    Booking.objects.filter(shipment_id=ctx.lease.pk).delete()


def mail_down(ctx):
    raise ConnectionError("mail server unreachable")


ASYNC_PLAN = (
    Step("quote", quote, save=record_booking, check=check_parcel, undo_run=cancel_at_carrier, undo=delete_booking),
)


@pytest.fixture
def registered():
    """Swap the shipment type's declaration for the test, restored afterwards."""
    declared = declaration.get("shipment")

    def use(**fields):
        declaration._registry["shipment"] = replace(declared, **fields)

    seen.clear()
    yield use
    declaration._registry["shipment"] = declared


def test_async_steps__run_check_and_undo_run_are_awaited_save_and_undo_run_on_the_workers_thread(registered, clock):
    registered(steps=(*ASYNC_PLAN, Step("notify", mail_down)))  # the job stays pending, its quote saved
    shipment = Shipment.objects.create(parcel="books")
    report = run_batches("shipment", Shipment.objects.due(clock).order_by("pk"), budget=60, owner="w1", clock=clock)
    assert report.outcomes == {"retry": 1}
    assert seen == [("check", True), ("quote", True), ("save", False)]
    receipt = JobStepReceipt.objects.get(job_type="shipment", job_id=str(shipment.pk))
    assert (receipt.step, receipt.result) == ("quote", {"cents": 700})
    assert Booking.objects.get().carrier_ref == "CR-700"

    seen.clear()
    assert job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock).changed == [shipment.pk]
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    assert seen == [("undo_run", True), ("undo 700", False)]
    assert not Booking.objects.exists()
    assert Shipment.objects.get(pk=shipment.pk).state == "cancelled"


def test_async_handler__is_awaited_and_its_value_saved_by_the_finish(registered, clock):
    main = threading.get_ident()

    async def send(ctx):
        await asyncio.sleep(0)
        # The ORM from the handler goes through sync_to_async, back on the worker's own thread.
        here, shipment = await sync_to_async(lambda: (threading.get_ident(), Shipment.objects.get(pk=ctx.lease.pk)))()
        return {"parcel": shipment.parcel, "on_the_workers_thread": here == main}

    registered(steps=(), handler=send)
    Shipment.objects.create(parcel="books")
    report = run_batches("shipment", Shipment.objects.due(clock).order_by("pk"), budget=60, owner="w1", clock=clock)
    assert report.outcomes == {"done": 1}
    assert JobAttempt.objects.get(job_type="shipment").result == {"parcel": "books", "on_the_workers_thread": True}


@pytest.mark.parametrize("part", ["save", "undo"])
def test_async_steps__a_coroutine_save_or_undo_is_refused_where_it_is_declared(part):
    async def writes(ctx, result):
        return None

    with pytest.raises(TypeError, match=f"Step 'book': {part} is a coroutine function .* declare {part} with def"):
        Step("book", save=writes) if part == "save" else Step("book", undo=writes)


def test_step_parts__one_that_cannot_take_its_arguments_is_refused_where_it_is_declared():
    def save_without_result(ctx):
        return None

    with pytest.raises(
        TypeError, match=r"Step 'book': save is called as save\(ctx, result\), and .*save_without_result"
    ):
        Step("book", save=save_without_result)
    with pytest.raises(TypeError, match=r"run is called as run\(ctx\)"):
        Step("book", run=lambda: None)
    Step("book", run=lambda ctx, extra=None: None, save=lambda *args: None)  # defaults and *args take them


def test_handler__one_that_cannot_take_the_context_is_refused_at_registration():
    def send_invoice():
        return None

    with pytest.raises(ImproperlyConfigured, match=r"handler .*send_invoice is called with one argument"):
        register(JobType(name="no_context", model=Shipment, handler=send_invoice))
    assert "no_context" not in {jt.name for jt in declaration.job_types()}

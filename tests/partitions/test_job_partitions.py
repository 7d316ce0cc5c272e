"""PostgreSQL, real time: a site's own job type (tests/jobs) cut off from the database mid-attempt.

Worker A's connections (its own and its heartbeats') go through a silent TCP proxy with the worker
session limits; worker B and the test talk to PostgreSQL directly. The link falls silent right after
a chosen statement of A's landed: before the claim landed, during a step's work, at the guarded
save, at the finish, and in a batch drain's group finish. B takes the job over once A's lease could
expire; after healing, A writes nothing but its own attempt's ending, which says where it was cut off
and what it read back. A never raises, and never writes a finish (or a step) under a lost lease.
"""

import threading

import pytest

from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.carrier import during_booking
from tests.jobs.shipping.models import Booking, Shipment
from tests.partitions.conftest import RECOVERY_WAIT, TTL, run_in_thread
from weave.jobs.batch import run_batches
from weave.jobs.runner import run_job
from weave.models import JobAttempt, JobStepReceipt

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
SHIPMENTS = Shipment._meta.db_table
INVOICES = Invoice._meta.db_table
work_may_end = threading.Event()


@pytest.fixture(autouse=True)
def short_leases(settings, worker_limits):
    # Both test job types take their TTL from these keys: A's lease lapses within seconds.
    settings.WEAVE = {**worker_limits, "LEASE_TTL": TTL, "SHIPPING_LEASE_TTL": TTL}
    during_booking.clear()
    yield
    during_booking.clear()
    work_may_end.set()


def _take_over(job_type, pk):
    """B runs the job as soon as the database lets it claim (a bounded wait), and finishes it."""
    import time

    deadline = time.monotonic() + RECOVERY_WAIT
    while True:
        outcome = run_job(job_type, pk, owner="worker-b")
        if outcome not in {"busy", "not due"} or time.monotonic() > deadline:
            return outcome
        time.sleep(0.05)


def _a_runs(job_type, pk):
    thread, result = run_in_thread("worker-a", lambda: run_job(job_type, pk, owner="worker-a"))
    return thread, result


def _ended(thread, result):
    thread.join(30)
    assert not thread.is_alive() and "error" not in result, result
    return result["value"]


def _attempts(job_type, pk):
    rows = JobAttempt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("fence")
    return list(rows.values_list("owner", "fence", "outcome", "reason"))


def test_cut_before_the_claim_landed__a_writes_nothing_and_b_takes_the_job(cut_off):
    shipment = Shipment.objects.create(parcel="box")
    cut = cut_off("worker-a")
    cut.after(rf'UPDATE "{SHIPMENTS}" SET "attempts"')  # the claim ran; its COMMIT meets the silent link
    thread, result = _a_runs("shipment", shipment.pk)
    cut.wait_cut()

    assert _take_over("shipment", shipment.pk) == "done"
    cut.proxy.heal()
    assert _ended(thread, result) == "cut off"
    # Nothing of A's exists: B's claim was the first to land (fence 1, attempt 1).
    assert [row[:3] for row in _attempts("shipment", shipment.pk)] == [("worker-b", 1, "done")]
    shipment.refresh_from_db()
    assert (shipment.state, shipment.attempts) == ("done", 1)


def test_cut_at_the_guarded_save__nothing_of_the_step_lands_and_a_records_only_its_ending(cut_off):
    shipment = Shipment.objects.create(parcel="box")
    cut = cut_off("worker-a", "heartbeat-")
    # The guarded update of quote's save landed; the receipt and the COMMIT do not.
    cut.after(rf'UPDATE "{SHIPMENTS}" SET "lease_expires_at"', thread_prefix="worker-a")
    thread, result = _a_runs("shipment", shipment.pk)
    cut.wait_cut()

    assert _take_over("shipment", shipment.pk) == "done"
    cut.proxy.heal()
    assert _ended(thread, result) == "blocked"
    (a, b) = _attempts("shipment", shipment.pk)
    assert (a[0], a[2], b[0], b[2]) == ("worker-a", "blocked", "worker-b", "done")
    assert "Cut off from the database at step quote" in a[3]
    assert "nothing of step quote's save landed" in a[3]
    assert f"worker-b at fence {b[1]}" in a[3]
    # Every receipt and booking is B's: A's save never landed and A wrote nothing after the cut.
    receipts = JobStepReceipt.objects.filter(job_type="shipment", job_id=str(shipment.pk))
    assert set(receipts.values_list("step", "fence")) == {("quote", b[1]), ("book", b[1])}
    assert list(Booking.objects.values_list("written_by", flat=True)) == ["worker-b"]


def test_cut_during_a_steps_work__the_heartbeats_failure_wins_and_a_records_only_its_ending(cut_off):
    work_may_end.clear()
    shipment = Shipment.objects.create(parcel="box")

    def slow_call(ctx, hb):
        if ctx.lease.owner == "worker-a":
            work_may_end.wait(30)  # a slow carrier call; A's heartbeat renews meanwhile

    during_booking.append(slow_call)
    cut = cut_off("worker-a", "heartbeat-")
    cut.after(rf'UPDATE "{SHIPMENTS}" SET "lease_expires_at"', thread_prefix="heartbeat-")
    thread, result = _a_runs("shipment", shipment.pk)
    try:
        cut.wait_cut()
        assert _take_over("shipment", shipment.pk) == "done"
        cut.proxy.heal()
    finally:
        work_may_end.set()
    assert _ended(thread, result) == "blocked"
    a, b = _attempts("shipment", shipment.pk)
    assert (a[0], a[2]) == ("worker-a", "blocked")
    assert "at step book" in a[3] and f"fence {b[1]}" in a[3]
    assert not JobStepReceipt.objects.filter(job_type="shipment", step="book", fence=a[1]).exists()
    assert list(Booking.objects.values_list("written_by", flat=True)) == ["worker-b"]


def test_cut_at_the_finish__no_stale_finish_and_a_records_only_its_ending(cut_off):
    shipment = Shipment.objects.create(parcel="box")
    cut = cut_off("worker-a", "heartbeat-")
    # The guarded finish (release) landed; the attempt record and the COMMIT do not.
    cut.after(rf'UPDATE "{SHIPMENTS}" SET "owner" = NULL', thread_prefix="worker-a")
    thread, result = _a_runs("shipment", shipment.pk)
    cut.wait_cut()

    assert _take_over("shipment", shipment.pk) == "done"
    cut.proxy.heal()
    assert _ended(thread, result) == "blocked"
    a, b = _attempts("shipment", shipment.pk)
    assert (a[0], a[2], b[0], b[2]) == ("worker-a", "blocked", "worker-b", "done")
    assert "Cut off from the database at the finish" in a[3] and "nothing of the finish landed" in a[3]
    assert f"worker-b at fence {b[1]}" in a[3]
    shipment.refresh_from_db()
    assert (shipment.state, shipment.fence, shipment.owner) == ("done", b[1], None)


def test_a_cut_off_batch_drain_writes_no_stale_finish_and_leaves_its_rows_for_the_next_claim(cut_off):
    invoices = [Invoice.objects.create(number=f"N{i}", email=f"a{i}@example.com") for i in range(3)]
    cut = cut_off("worker-a", "batch-heartbeat-")
    # The group finish's guarded release of all three rows landed; the records and the COMMIT do not.
    cut.after(rf'UPDATE "{INVOICES}" AS n SET', thread_prefix="worker-a")
    due = Invoice.objects.due().order_by("pk")
    thread, result = run_in_thread("worker-a", lambda: run_batches("invoice", due, owner="worker-a", budget=30))
    cut.wait_cut()

    # The next claim takes every row once A's leases lapse, and finishes them.
    for invoice in invoices:
        assert _take_over("invoice", invoice.pk) == "done"
    cut.proxy.heal()
    thread.join(30)
    assert not thread.is_alive() and "error" not in result, result
    assert result["value"].outcomes == {"blocked": 3}
    for invoice in invoices:
        a, b = _attempts("invoice", invoice.pk)
        assert (a[0], a[2], b[0], b[2]) == ("worker-a", "blocked", "worker-b", "done")
        assert "Cut off from the database at the finish" in a[3] and f"worker-b at fence {b[1]}" in a[3]
        invoice.refresh_from_db()
        assert (invoice.state, invoice.fence, invoice.owner) == ("done", b[1], None)

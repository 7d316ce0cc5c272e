"""A site's job type cut off from the database while its lease is still its own (both databases).

The link failure is the driver's own error class, raised where the database would raise it: inside
a step's work or a handler. The real partitions (a silent link, the server aborting the transaction,
another worker taking over) are in tests/partitions/test_job_partitions.py.
"""

from datetime import timedelta

import pytest
from django.db import OperationalError, connection

from tests.jobs.invoices.mailer import mailer
from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.carrier import during_booking
from tests.jobs.shipping.models import Booking, Shipment
from tests.lost_reply import commit_reply_lost
from weave.jobs.batch import run_batches
from weave.jobs.runner import run_job, run_next
from weave.models import JobAttempt, JobStepReceipt

pytestmark = pytest.mark.django_db(transaction=True)
LINK_DOWN = "server closed the connection unexpectedly"


def _cut_once():
    """A hook that fails like a lost link the first time it is called, and does nothing after."""
    calls = []

    def cut(*args, **kwargs):
        if not calls:
            calls.append(1)
            raise OperationalError(LINK_DOWN)

    return cut


def test_a_step_cut_off_under_a_lease_still_ours_gives_the_job_back_and_says_where():
    shipment = Shipment.objects.create(parcel="box")
    during_booking.append(_cut_once())

    assert run_job("shipment", shipment.pk, owner="worker-a") == "retry"
    (attempt,) = JobAttempt.objects.filter(job_type="shipment", job_id=str(shipment.pk))
    assert attempt.outcome == "retry" and attempt.owner == "worker-a"
    assert attempt.reason == (
        f"Cut off from the database at step book ({LINK_DOWN}); nothing of step book's save landed. Gave the job back."
    )
    assert attempt.error_class == "" and attempt.started_at <= attempt.finished_at
    # Due again at once: the record says so, to the ms, as every retry's does.
    assert abs(attempt.retry_at - attempt.finished_at) < timedelta(milliseconds=1)
    shipment.refresh_from_db()
    # Given back in one guarded statement: pending, due now, no lease; quote's save stays, book never saved.
    assert (shipment.state, shipment.owner, shipment.next_attempt_at) == ("pending", None, None)
    assert "Cut off from the database at step book" in shipment.last_error
    receipts = JobStepReceipt.objects.filter(job_type="shipment", job_id=str(shipment.pk))
    assert list(receipts.values_list("step", flat=True)) == ["quote"]
    assert not Booking.objects.exists()

    assert run_job("shipment", shipment.pk, owner="worker-b") == "done"
    shipment.refresh_from_db()
    assert shipment.state == "done" and Booking.objects.get().written_by == "worker-b"


def test_a_cut_off_batch_drain_writes_no_waiting_finish_and_ends_each_open_attempt(monkeypatch):
    invoices = [Invoice.objects.create(number=f"N{i}", email=f"a{i}@example.com") for i in range(3)]
    sent = mailer.send
    cut = _cut_once()

    def send(to, subject, *, key):
        if to == "a1@example.com":
            cut()
        return sent(to, subject, key=key)

    monkeypatch.setattr(mailer, "send", send)
    due = Invoice.objects.due().order_by("pk")
    report = run_batches("invoice", due, owner="worker-a", budget=30, flush_seconds=60)

    assert report.outcomes == {"retry": 3}
    reasons = dict(JobAttempt.objects.filter(job_type="invoice").values_list("job_id", "reason"))
    # The first row's finish was waiting to be written: it is not written, and its attempt says so.
    assert reasons[str(invoices[0].pk)].startswith("Cut off from the database at the finish")
    assert reasons[str(invoices[1].pk)].startswith("Cut off from the database at step run")
    assert reasons[str(invoices[2].pk)] == (
        f"Cut off from the database before it started ({LINK_DOWN}); none of its steps had saved anything yet."
        " Gave the job back."
    )
    assert not JobAttempt.objects.filter(outcome="done").exists()
    for record in JobAttempt.objects.filter(job_type="invoice"):
        assert abs(record.retry_at - record.finished_at) < timedelta(milliseconds=1), record.reason
    for invoice in invoices:
        invoice.refresh_from_db()
        assert (invoice.state, invoice.owner, invoice.finished_at) == ("pending", None, None)

    # The rows are left for the next claim, which finishes them.
    assert run_batches("invoice", due, budget=30).outcomes == {"done": 3}


def _claim_cut_off(execute, sql, params, many, context):
    # The link fails as the claim is sent: the server never sees it.
    if 'SET "attempts"' in sql:
        raise OperationalError(LINK_DOWN)
    return execute(sql, params, many, context)


def test_a_claim_cut_off_before_it_landed_leaves_nothing_to_end():
    shipment = Shipment.objects.create(parcel="box")
    with connection.execute_wrapper(_claim_cut_off):
        assert run_job("shipment", shipment.pk, owner="worker-a") == "cut off"
        assert run_next("shipment", Shipment.objects.due().order_by("pk"), owner="worker-a") == "cut off"
    assert not JobAttempt.objects.exists()
    shipment.refresh_from_db()
    assert (shipment.state, shipment.owner, shipment.fence, shipment.attempts) == ("pending", None, 0, 0)
    assert run_job("shipment", shipment.pk, owner="worker-b") == "done"


def test_a_single_attempts_finish_whose_reply_was_lost_is_its_ending_and_nothing_more(monkeypatch):
    import weave.jobs.runner as runner

    shipment = Shipment.objects.create(parcel="box")
    finish = lambda model, *args, **kwargs: model is JobAttempt  # noqa: E731  (the finish, not a step's receipt)
    with commit_reply_lost(monkeypatch, finish, runner, "insert_receipts") as lost:
        assert run_job("shipment", shipment.pk, owner="worker-a") == "done"
    assert lost["fired"]
    assert list(JobAttempt.objects.values_list("owner", "outcome")) == [("worker-a", "done")]
    shipment.refresh_from_db()
    assert (shipment.state, shipment.owner, shipment.fence) == ("done", None, 1)
    assert run_job("shipment", shipment.pk, owner="worker-b") == "not due"


def test_a_batch_finish_whose_reply_was_lost_counts_and_tells_what_landed(monkeypatch):
    import weave.jobs.batch as batch
    from tests.jobs.shipping.background import add
    from weave.models import TaskRow
    from weave.tasks.compat import TaskResultStatus, task_finished
    from weave.tasks.worker import drain

    heard = []

    def record(sender, task_result, **kwargs):
        heard.append((task_result.id, task_result.status))

    results = [add.enqueue(i, 1) for i in range(3)]
    task_finished.connect(record, weak=False)
    try:
        with commit_reply_lost(monkeypatch, lambda *a, **k: True, batch, "insert_receipts_returning") as lost:
            assert drain() == {"done": 3}
    finally:
        task_finished.disconnect(record)
    assert lost["fired"]
    # Told once each, as they ended; one record each (the finish's own), none stale or twice.
    assert sorted(heard) == sorted((r.id, TaskResultStatus.SUCCESSFUL) for r in results)
    records = sorted(JobAttempt.objects.values_list("job_id", "outcome"))
    assert records == sorted((str(pk), "done") for pk in TaskRow.objects.values_list("pk", flat=True))
    assert drain() == {}


def test_a_finish_written_beside_a_long_row_whose_reply_was_lost_is_not_counted_as_taken_over(monkeypatch):
    """The heartbeat's thread writes the rows finished before a long one; that COMMIT lands with its reply lost.

    The drain's own thread writes them again with the rows after: the guard refuses what already
    landed, and the drain must see its own finish there, not a takeover."""
    import threading

    import weave.jobs.batch as batch

    invoices = [Invoice.objects.create(number=f"N{i}", email=f"a{i}@example.com") for i in range(2)]
    sent = mailer.send
    long_row = threading.Event()

    def send(to, subject, *, key):
        if to == "a1@example.com":
            long_row.wait(10)  # a slow send: the rows finished before it are written meanwhile (bounded)
        return sent(to, subject, key=key)

    monkeypatch.setattr(mailer, "send", send)
    due = Invoice.objects.due().order_by("pk")

    def first_write(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            long_row.set()  # the heartbeat's write of the first row is in: the long row may end
            return True
        return False

    with commit_reply_lost(monkeypatch, first_write, batch, "insert_receipts_returning") as lost:
        report = run_batches("invoice", due, owner="worker-a", budget=30, flush_seconds=0.1)
    assert lost["fired"]
    assert report.outcomes == {"done": 2}
    records = sorted(JobAttempt.objects.filter(job_type="invoice").values_list("job_id", "owner", "outcome"))
    assert records == sorted((str(invoice.pk), "worker-a", "done") for invoice in invoices)


def test_a_single_tasks_finish_whose_reply_was_lost_is_told_finished_once(monkeypatch):
    import weave.jobs.runner as runner
    from tests.jobs.shipping.background import add
    from weave.models import TaskRow
    from weave.tasks.compat import TaskResultStatus, task_finished

    heard = []

    def record(sender, task_result, **kwargs):
        heard.append((task_result.id, task_result.status))

    result = add.enqueue(2, 3)
    finish = lambda model, *args, **kwargs: model is JobAttempt  # noqa: E731
    task_finished.connect(record, weak=False)
    try:
        with commit_reply_lost(monkeypatch, finish, runner, "insert_receipts") as lost:
            assert run_next("task", TaskRow.objects.due().order_by("pk"), owner="worker-a") == "done"
    finally:
        task_finished.disconnect(record)
    assert lost["fired"]
    assert heard == [(result.id, TaskResultStatus.SUCCESSFUL)]
    assert list(JobAttempt.objects.values_list("owner", "outcome")) == [("worker-a", "done")]

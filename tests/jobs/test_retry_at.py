"""A retry's record carries the due time its finish gave the job's row (`JobAttempt.retry_at`), read back from
that finish, in the one-job runner and in batch mode; the job's story says it on every retry line."""

from io import StringIO

import pytest
from django.core.management import call_command

from tests.jobs.invoices.mailer import mailer
from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.models import Shipment
from weave.jobs.batch import run_batches
from weave.jobs.runner import run_job
from weave.models import JobAttempt
from weave.timeline import clock_time

pytestmark = pytest.mark.django_db


def _run_one(pk):
    return run_job("invoice", pk)


def _run_batch(pk):
    report = run_batches("invoice", Invoice.objects.due().order_by("next_attempt_at", "pk"), budget=60)
    (outcome,) = report.outcomes
    return outcome


@pytest.fixture
def mail_down_twice(monkeypatch):
    """The mailer refuses the first two sends (a retried error), then sends."""
    real_send = mailer.send
    refusals = [2]

    def send(to, subject, *, key):
        if refusals[0]:
            refusals[0] -= 1
            raise ConnectionError("the mail server is down")
        return real_send(to, subject, key=key)

    monkeypatch.setattr(mailer, "send", send)


def _story(pk):
    out = StringIO()
    call_command("weave_explain", "invoice", str(pk), stdout=out)
    return out.getvalue()


def _retry_line(story, number):
    (line,) = [line for line in story.splitlines() if f"attempt {number} (fence {number}):" in line]
    return line


@pytest.mark.parametrize("run", [_run_one, _run_batch], ids=["runner", "batch"])
def test_retry_at__each_retry_records_the_due_time_its_finish_gave_the_row(mail_down_twice, run):
    invoice = Invoice.objects.create(number="R1", email="r@example.com")
    dues = []
    for _ in range(2):
        assert run(invoice.pk) == "retry"
        due = Invoice.objects.get(pk=invoice.pk).next_attempt_at  # what the finish stored on the row
        assert due is not None
        dues.append(due)
        if len(dues) == 1:
            Invoice.objects.filter(pk=invoice.pk).update(next_attempt_at=None)  # due now: no waiting out the backoff

    records = list(JobAttempt.objects.filter(job_type="invoice", job_id=str(invoice.pk)).order_by("number"))
    assert [(a.outcome, a.retry_at) for a in records] == [("retry", dues[0]), ("retry", dues[1])]
    story = _story(invoice.pk)
    for number, due in enumerate(dues, start=1):
        assert _retry_line(story, number).endswith(
            f"ConnectionError: the mail server is down (at step run). Next try due {clock_time(due)} (database time)."
        )

    Invoice.objects.filter(pk=invoice.pk).update(next_attempt_at=None)
    assert run(invoice.pk) == "done"
    done = JobAttempt.objects.get(job_type="invoice", job_id=str(invoice.pk), number=3)
    assert done.retry_at is None, "only a retry has a next try"
    story = _story(invoice.pk)
    for number, due in enumerate(dues, start=1):
        # No longer the retry the job waits on (the row's due time is gone): said from the record alone.
        assert _retry_line(story, number).endswith(f"Next try due {clock_time(due)} (database time).")


def test_retry_at__a_failed_attempt_records_none():
    shipment = Shipment.objects.create(parcel="")  # no parcel: the job fails for good
    assert run_job("shipment", shipment.pk) == "failed"
    (failed,) = JobAttempt.objects.filter(job_type="shipment", job_id=str(shipment.pk))
    assert (failed.outcome, failed.retry_at) == ("failed", None)


@pytest.mark.parametrize("batch", [False, True], ids=["runner", "batch"])
def test_retry_at__a_stale_finish_that_would_retry_records_none(monkeypatch, clock, batch):
    """The attempt fails with a retried error after its lease lapsed and a rival took the job: its finish is
    refused, so it wrote no due time to the row, and its `blocked` record says none either."""
    invoice = Invoice.objects.create(number="S1", email="s@example.com")

    def stall_then_fail(to, subject, *, key):
        clock.advance(3600)  # the lease lapsed
        Invoice.objects.claim(invoice.pk, owner="rival", ttl=30, clock=clock)
        raise ConnectionError("the mail server is down")

    monkeypatch.setattr(mailer, "send", stall_then_fail)
    if batch:
        rows = Invoice.objects.due(clock).order_by("next_attempt_at", "pk")
        assert run_batches("invoice", rows, budget=60, owner="stale", clock=clock).outcomes == {"blocked": 1}
    else:
        assert run_job("invoice", invoice.pk, owner="stale", clock=clock) == "blocked"
    (stale,) = JobAttempt.objects.filter(job_type="invoice", job_id=str(invoice.pk))
    assert (stale.owner, stale.outcome, stale.retry_at) == ("stale", "blocked", None)
    assert Invoice.objects.get(pk=invoice.pk).next_attempt_at is None, "the refused finish wrote nothing"


def test_retry_at__a_retried_task_records_the_due_time_its_drain_gave_the_row():
    """`django.tasks` run through the core's batch finish: a retried task's record has its row's due time too."""
    from tests.jobs.shipping.background import explode
    from weave.models import TaskRow
    from weave.tasks.worker import drain

    result = explode.using(retry_on=[ValueError], backoff=60).enqueue()
    assert drain() == {"retry": 1}
    row = TaskRow.objects.get(result_id=result.id)
    (retried,) = JobAttempt.objects.filter(job_type="task", job_id=str(row.pk))
    assert row.next_attempt_at is not None
    assert (retried.outcome, retried.retry_at) == ("retry", row.next_attempt_at)


@pytest.fixture
def fixed_delays(monkeypatch):
    """Backoffs without jitter, and with a fraction of a second: attempt n waits 7.25 * n s."""
    from weave.jobs.policy import RetryPolicy

    monkeypatch.setattr(RetryPolicy, "delay", lambda self, attempt, rng=None: 7.25 * attempt)


@pytest.mark.parametrize("run", [_run_one, _run_batch], ids=["runner", "batch"])
def test_retry_at__a_retry_ends_at_the_reading_its_due_time_was_counted_from(fixed_delays, mail_down_twice, run):
    """Not the record's INSERT, a moment later: its due time is then exactly its delay after its end."""
    from datetime import timedelta

    invoice = Invoice.objects.create(number="D1", email="d@example.com")
    for _ in range(2):
        assert run(invoice.pk) == "retry"
        Invoice.objects.filter(pk=invoice.pk).update(next_attempt_at=None)
    records = JobAttempt.objects.filter(job_type="invoice", job_id=str(invoice.pk)).order_by("number")
    assert [(a.number, a.retry_at - a.finished_at) for a in records] == [
        (1, timedelta(seconds=7.25)),
        (2, timedelta(seconds=14.5)),
    ]
    assert all(a.started_at <= a.finished_at for a in records)


def test_retry_at__a_retried_task_ends_at_the_reading_its_due_time_was_counted_from(fixed_delays):
    from datetime import timedelta

    from tests.jobs.shipping.background import explode
    from weave.models import TaskRow
    from weave.tasks.worker import drain

    result = explode.using(retry_on=[ValueError], backoff=60).enqueue()
    assert drain() == {"retry": 1}
    row = TaskRow.objects.get(result_id=result.id)
    (retried,) = JobAttempt.objects.filter(job_type="task", job_id=str(row.pk))
    assert retried.retry_at - retried.finished_at == timedelta(seconds=7.25)

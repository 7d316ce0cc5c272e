"""A row a batch drain claimed and gave back unstarted is accounted for in its job's story (a `released` record).

Its claim took a fence; the record says who held it, why it was given back and when (database time). It is
no attempt: the attempt counter is given back with the row, the dashboard's troubles and the attempt
metrics leave it out.
"""

import re
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.jobs.invoices import mailer as mailer_module
from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.contract import look_around, while_running
from weave.dashboard import verdict
from weave.jobs import get
from weave.jobs.batch import BUDGET_ENDED, HANDED_ON, run_batches
from weave.jobs.console import findings, outcome_counts
from weave.jobs.explain import explain_job
from weave.jobs.tasks import drain as drain_jobs
from weave.metrics import collect_job_metrics
from weave.models import JobAttempt, TaskRow
from weave.telemetry import db_now

pytestmark = pytest.mark.django_db
TTL = 30.0  # the invoice type's lease (WEAVE LEASE_TTL in the test settings)


@pytest.fixture(autouse=True)
def no_hooks():
    while_running.clear()
    yield
    while_running.clear()


def records_of(job_type, pk):
    return list(JobAttempt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("number", "pk"))


def first_send_runs(monkeypatch, then):
    """The first invoice's send calls `then()` before it sends (the others send at once)."""
    send = mailer_module.mailer.send
    calls = []

    def send_first_slowly(to, subject, *, key):
        calls.append(subject)
        if len(calls) == 1:
            then()
        return send(to, subject, key=key)

    monkeypatch.setattr(mailer_module.mailer, "send", send_first_slowly)


def fences_in(timeline):
    """Every fence a line of the story names (its title and summary left out)."""
    return {int(n) for entry in timeline.entries for n in re.findall(r"\bfence (\d+)", entry.text)}


def test_give_back__rows_not_started_at_the_end_of_the_budget_are_recorded_released(clock, monkeypatch):
    rows = [Invoice.objects.create(number=f"B{i}", email=f"b{i}@example.com") for i in range(3)]
    claimed = clock.current
    first_send_runs(monkeypatch, lambda: clock.advance(11))  # the first row spends the drain's budget
    due = Invoice.objects.due(clock).order_by("pk")
    report = run_batches("invoice", due, budget=10, owner="me", clock=clock)
    assert report.outcomes == {"done": 1} and report.more  # a give-back is no attempt's outcome
    for row in rows[1:]:
        row.refresh_from_db()
        assert (row.owner, row.fence, row.attempts, row.state) == (None, 1, 0, "pending")  # its claim undone
        (given_back,) = records_of("invoice", row.pk)
        assert (given_back.outcome, given_back.owner, given_back.fence, given_back.number) == ("released", "me", 1, 1)
        assert given_back.reason == BUDGET_ENDED
        assert "given back unstarted at the end of the drain's budget" in given_back.reason.lower()
        # Database time (the fake clock's literal in the same SQL): from its claim to the give-back.
        assert (given_back.started_at, given_back.finished_at) == (claimed, claimed + timedelta(seconds=11))

    assert run_batches("invoice", Invoice.objects.due(clock).order_by("pk"), budget=10, owner="next", clock=clock)
    row = Invoice.objects.get(pk=rows[1].pk)
    assert (row.state, row.fence, row.attempts) == ("done", 2, 1)
    released, done = records_of("invoice", row.pk)
    assert (released.outcome, done.outcome, done.number, done.fence, done.owner) == ("released", "done", 1, 2, "next")

    story = explain_job("invoice", Invoice, row.pk, clock=clock)
    text = story.as_text()
    assert story.title.endswith("done, 1 attempt"), story.title  # the give-back is not counted
    assert fences_in(story) == {1, 2}, text  # every fence the row took is accounted for
    assert "fence 1 claimed by me (not started)" in text and f"fence 1: {BUDGET_ENDED}" in text
    assert "no end" not in text
    assert "1 claim given back unstarted, not counted as attempts (fence 1)" in story.summary
    assert "attempt 1, ended done" in story.summary

    # Not a trouble: the verdict's findings name no invoice (the fake clock's "now" is its literal).
    assert [f for f in findings(clock.current) if "invoice" in f.text] == []


def test_give_back__a_given_back_task_shows_no_error_or_worker_of_its_own(clock):
    results = [look_around.enqueue(f"g{i}") for i in range(2)]
    pk = TaskRow.objects.get(result_id=results[1].id).pk
    while_running.append(lambda context: clock.advance(11))  # the first task spends the drain's budget
    run_batches("task", TaskRow.objects.due(clock).order_by("pk"), budget=10, owner="me", clock=clock)
    (given_back,) = records_of("task", pk)
    assert (given_back.outcome, given_back.owner, given_back.fence) == ("released", "me", 1)
    while_running.clear()
    run_batches("task", TaskRow.objects.due(clock).order_by("pk"), budget=10, owner="next", clock=clock)
    result = look_around.get_result(results[1].id)
    assert result.status == "SUCCESSFUL"
    assert (result.errors, result.worker_ids) == ([], ["next"])


def test_give_back__a_lease_lost_before_it_writes_nothing_of_it_and_records_the_takeover(clock, monkeypatch):
    rows = [Invoice.objects.create(number=f"L{i}", email=f"l{i}@example.com") for i in range(3)]
    taken = [row.pk for row in rows[1:]]

    def stall_and_take_over():
        clock.advance(TTL + 1)  # stalled past the batch's lease (and the drain's budget)
        for pk in taken:
            lease = Invoice.objects.claim(pk, owner="fresh", ttl=TTL, clock=clock)
            Invoice.objects.guarded_update(lease, clock=clock, email="fresh@example.com")

    first_send_runs(monkeypatch, stall_and_take_over)
    due = Invoice.objects.due(clock).order_by("pk")
    report = run_batches("invoice", due, budget=10, owner="stale", clock=clock)
    # The running row's finish and both give-backs were refused: each attempt lost its lease.
    assert report.outcomes == {"blocked": 3}
    for pk in taken:
        row = Invoice.objects.get(pk=pk)
        # 0 rows changed: the new owner's lease, value and the attempt counter (the stale claim's) stand.
        assert (row.owner, row.fence, row.email, row.attempts) == ("fresh", 2, "fresh@example.com", 1)
        (lost,) = records_of("invoice", pk)  # nothing says it was given back: it was not
        assert (lost.outcome, lost.owner, lost.fence, lost.number) == ("blocked", "stale", 1, 1)
        assert lost.reason.startswith("Lease lost as it was given back unstarted:"), lost.reason
        assert "fresh at fence 2" in lost.reason
    assert not JobAttempt.objects.filter(outcome="released").exists()


def test_give_back__a_no_end_line_is_dated_at_the_claim_that_took_the_job_over(clock, monkeypatch):
    """An attempt that left no end (its worker stopped, before Weave recorded takeovers) is taken over by a claim
    that is given back: the story dates the takeover at that claim, not at the next attempt's."""
    first = Invoice.objects.create(number="N0", email="n0@example.com")
    orphan = Invoice.objects.create(number="N1", email="n1@example.com")
    stopped = Invoice.objects.filter(pk=orphan.pk)
    stopped.update(owner="gone", fence=1, attempts=1, lease_expires_at=clock.current - timedelta(seconds=1))
    took_over = clock.current
    first_send_runs(monkeypatch, lambda: clock.advance(11))
    run_batches("invoice", Invoice.objects.due(clock).order_by("pk"), budget=10, owner="me", clock=clock)
    clock.advance(5)
    run_batches("invoice", Invoice.objects.due(clock).order_by("pk"), budget=10, owner="next", clock=clock)
    assert Invoice.objects.get(pk=first.pk).state == "done"

    story = explain_job("invoice", Invoice, orphan.pk, clock=clock)
    (no_end,) = [e for e in story.entries if e.what == "no end"]
    assert no_end.at == took_over
    assert "the claim at fence 2 by me took it over (and gave it back unstarted)" in no_end.text
    assert {2, 3} <= fences_in(story)  # the claim given back, and the attempt that ran


@pytest.mark.django_db(transaction=True)
def test_give_back__a_hand_on_records_each_row_it_handed_on(monkeypatch):
    slow, *rest = [Invoice.objects.create(number=f"H{i}", email=f"h{i}@example.com") for i in range(3)]
    before = db_now()
    send = mailer_module.mailer.send

    def send_slowly(to, subject, *, key):
        if subject == f"Invoice {slow.number}":
            for _ in range(200):  # until the rest of its batch is free again (a bound only so old code ends)
                if Invoice.objects.filter(pk__in=[r.pk for r in rest], owner__isnull=True).count() == len(rest):
                    break
                threading.Event().wait(0.05)
        return send(to, subject, key=key)

    monkeypatch.setattr(mailer_module.mailer, "send", send_slowly)
    assert drain_jobs("invoice") == {"done": 1}
    (ran,) = records_of("invoice", slow.pk)
    for row in rest:
        (given_back,) = records_of("invoice", row.pk)
        assert (given_back.outcome, given_back.owner, given_back.fence, given_back.number) == (
            "released",
            ran.owner,  # the drain that ran the long row
            1,
            1,
        )
        assert given_back.reason == HANDED_ON
        assert "handed on to another drain: a row in the same batch ran long" in given_back.reason.lower()
        # Database time: claimed with the long row, given back while it ran (a second in, at least).
        assert given_back.started_at == ran.started_at
        assert ran.started_at + timedelta(seconds=1) <= given_back.finished_at <= ran.finished_at
    assert before <= ran.started_at

    assert drain_jobs("invoice") == {"done": 2}
    for row in rest:
        story = explain_job("invoice", Invoice, row.pk)
        text = story.as_text()
        assert fences_in(story) == {1, 2}, text
        assert f"fence 1: {HANDED_ON}" in text and story.title.endswith("done, 1 attempt")

    # A give-back is no trouble: no finding for the invoices, no blocked, failed or retried attempt counted.
    now = db_now()
    assert [f for f in findings(now) if "invoice" in f.text] == []
    assert verdict(now) == ("healthy", [])
    counts = outcome_counts(get("invoice"), before - timedelta(seconds=1))
    assert (counts["done"], counts["blocked"], counts["failed"], counts["retry"], counts["released"]) == (3, 0, 0, 0, 2)
    families = {family.name: family for family in collect_job_metrics()}
    attempts = {
        s.labels["outcome"]: s.value for s in families["weave_job_attempts"].samples if s.labels["job"] == "invoice"
    }
    assert "released" not in attempts and attempts["done"] == 3
    given = [s.value for s in families["weave_job_given_back"].samples if s.labels["job"] == "invoice"]
    assert given == [2]


def _give_back_statements(clock, monkeypatch, n):
    """The statements of a drain whose first row spends its budget, so the other `n - 1` rows are given back."""
    Invoice.objects.all().delete()
    JobAttempt.objects.all().delete()
    Invoice.objects.bulk_create([Invoice(number=f"S{n}-{i}", email=f"s{i}@example.com") for i in range(n)])
    first_send_runs(monkeypatch, lambda: clock.advance(11))
    due = Invoice.objects.due(clock).order_by("pk")
    with CaptureQueriesContext(connection) as queries:
        report = run_batches("invoice", due, budget=10, owner=f"drain-{n}", clock=clock)
    assert report.outcomes == {"done": 1}
    assert JobAttempt.objects.filter(outcome="released").count() == n - 1
    skipped = ("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT")
    return [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith(skipped)]


def test_give_back__a_batch_is_given_back_and_recorded_with_the_same_statements_whatever_its_size(clock, monkeypatch):
    # One guarded release of every row given back and one INSERT of their records, not a statement per row.
    assert len(_give_back_statements(clock, monkeypatch, 3)) == len(_give_back_statements(clock, monkeypatch, 9))


def test_give_back__the_admin_change_page_tells_it(admin_client, clock, monkeypatch):
    rows = [Invoice.objects.create(number=f"A{i}", email=f"a{i}@example.com") for i in range(2)]
    first_send_runs(monkeypatch, lambda: clock.advance(11))
    run_batches("invoice", Invoice.objects.due(clock).order_by("pk"), budget=10, owner="drain-a", clock=clock)
    page = admin_client.get(reverse("admin:invoices_invoice_change", args=[rows[1].pk])).content.decode()
    story = page[page.index("What happened") : page.index('name="number"')]
    assert "fence 1 claimed by drain-a (not started)" in story
    assert "fence 1: Given back unstarted at the end of the drain&#x27;s budget" in story
    assert "1 claim given back unstarted, not counted as attempts (fence 1)" in story


def test_give_back__an_undo_given_back_between_its_tries_keeps_its_count_of_failed_tries(clock):
    """An undo's retry policy counts its failed tries from the records; a give-back between two is no try."""
    from tests.jobs.shipping.models import Shipment
    from weave.jobs.context import JobContext
    from weave.jobs.undo import undo_tries
    from weave.leases import Lease

    shipment = Shipment.objects.create(parcel="books", state="undoing", attempts=2, fence=2)
    common = {"job_type": "shipment", "job_id": str(shipment.pk), "started_at": clock.current}
    failed = {"undo": {"failed": True, "step": "book"}}
    JobAttempt.objects.create(
        **common, number=1, owner="w1", fence=1, outcome="retry", result=failed, finished_at=clock.current
    )
    JobAttempt.objects.create(**common, number=2, owner="drain", fence=2, outcome="released", finished_at=clock.current)
    lease = Lease(pk=shipment.pk, owner="w3", fence=3)
    ctx = JobContext("shipment", shipment, lease, 2, 0, TTL, clock)
    assert undo_tries(ctx) == 2  # the failed try, then this one


def test_attempts_that_ran__leaves_out_the_claims_given_back_unstarted_as_ran_does_for_a_queryset():
    from weave.models import attempts_that_ran

    outcomes = ["retry", "released", "done", "released", "blocked"]
    records = [JobAttempt(number=n, outcome=o) for n, o in enumerate(outcomes, 1)]
    assert [a.number for a in attempts_that_ran(records)] == [1, 3, 5]
    assert attempts_that_ran(iter(records)) == attempts_that_ran(records), "any iterable, read once"

"""A site's job type as one model and one `@job` function in its app's jobs.py: found, run, fenced, told."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db.models import F

from tests.jobs.invoices.jobs import send_invoice
from tests.jobs.invoices.mailer import mailer
from tests.jobs.invoices.models import Invoice
from tests.leasetest.models import Job
from weave import jobs
from weave.jobs import job
from weave.jobs.runner import run_job
from weave.models import JobAttempt

pytestmark = pytest.mark.django_db
TTL = 30


@pytest.fixture(autouse=True)
def fresh_mailer():
    mailer.sent.clear()
    mailer.calls.clear()


def test_discovery__the_jobs_module_is_imported_at_start_and_declares_the_type():
    declared = jobs.get("invoice")  # named after the model
    assert declared.model is Invoice and declared.handler is send_invoice
    assert declared.runnable and declared.explainer is not None and declared.schedule is not None


def test_run__the_decorated_function_runs_once_under_the_lease(clock):
    invoice = Invoice.objects.create(number="2026-001", email="buyer@example.com")
    assert run_job("invoice", invoice.pk, owner="w1", clock=clock) == "done"
    invoice.refresh_from_db()
    assert (invoice.state, invoice.attempts, invoice.owner, invoice.fence) == ("done", 1, None, 1)
    assert list(mailer.sent.values()) == [("buyer@example.com", "Invoice 2026-001")]
    attempt = JobAttempt.objects.get(job_type="invoice", job_id=str(invoice.pk))
    assert attempt.outcome == "done" and attempt.result == {"message_id": "msg-1"}


def test_run__a_stale_worker_is_refused_and_the_new_holder_keeps_the_job(clock):
    invoice = Invoice.objects.create(number="2026-002", email="buyer@example.com")
    stale = Invoice.objects.claim(invoice.pk, owner="stale", ttl=TTL, clock=clock)
    clock.advance(TTL + 1)
    assert run_job("invoice", invoice.pk, owner="rival", clock=clock) == "done"
    changed = Invoice.objects.filter(pk=invoice.pk, owner=stale.owner, fence=stale.fence).update(sent_as="stale")
    assert changed == 0
    row = Invoice.objects.values("state", "fence", "sent_as").get(pk=invoice.pk)
    assert row == {"state": "done", "fence": 2, "sent_as": ""}


def test_explain__tells_the_story_of_a_decorated_job(clock, capsys):
    invoice = Invoice.objects.create(number="2026-003", email="buyer@example.com")
    run_job("invoice", invoice.pk, owner="w1", clock=clock)
    call_command("weave_explain", "invoice", str(invoice.pk))
    out = capsys.readouterr().out
    assert "w1" in out and "done" in out
    assert "attempt 1, ended done." in out and "no reason given" not in out  # a success needs no reason


def test_declaring_again__the_same_function_is_a_no_op_and_a_clash_is_refused():
    assert job(Invoice)(send_invoice) is send_invoice  # the module imported twice: nothing changes
    assert jobs.get("invoice").handler is send_invoice

    def other(ctx):
        return None

    with pytest.raises(ImproperlyConfigured, match="declared twice"):
        job(Invoice)(other)
    with pytest.raises(ImproperlyConfigured, match="declared twice"):
        job(Job, name="invoice")(send_invoice)
    assert jobs.get("invoice").handler is send_invoice


def test_declaration__a_model_without_the_job_fields_or_a_missing_result_field_is_refused_at_start():
    from django.contrib.auth.models import Group

    def handler(ctx):
        return None

    with pytest.raises(ImproperlyConfigured, match="Group is not a weave.models.JobModel"):
        job(Group, name="group_job")(handler)
    with pytest.raises(ImproperlyConfigured, match="result_field 'no_such' is not a field of Invoice"):
        job(Invoice, name="invoice_result", result_field="no_such")(handler)
    with pytest.raises(LookupError):
        jobs.get("group_job")


def test_run__a_stale_finish_is_blocked_and_names_the_worker_that_took_the_job_over(clock, monkeypatch):
    invoice = Invoice.objects.create(number="2026-020", email="buyer@example.com")
    real_send = mailer.send

    def stall_then_send(to, subject, *, key):
        monkeypatch.setattr(mailer, "send", real_send)  # once: the rival sends undisturbed
        clock.advance(TTL * 10)  # the stale worker stalls past its lease, heartbeat and all
        assert run_job("invoice", invoice.pk, owner="rival", clock=clock) == "done"
        return real_send(to, subject, key=key)

    monkeypatch.setattr(mailer, "send", stall_then_send)
    assert run_job("invoice", invoice.pk, owner="stale", clock=clock) == "blocked"
    blocked = JobAttempt.objects.get(job_type="invoice", job_id=str(invoice.pk), owner="stale")
    assert blocked.outcome == "blocked"
    assert "fence 2 took the row over" in blocked.reason and "taken over by rival" in blocked.reason


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_create__tells_the_sleeping_watchers_at_commit_so_the_job_runs_within_a_second():
    from weave import wake

    raw = wake.open_listener()
    try:
        Invoice.objects.create(number="2026-030", email="buyer@example.com")
        heard = [n.payload for n in raw.notifies(timeout=5.0, stop_after=1)]
    finally:
        raw.close()
    assert heard == [""]


def notify_statements(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "notify" in q["sql"].lower()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_create__a_hundred_rows_in_one_transaction_send_one_wake_up_after_commit():
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from weave import wake

    raw = wake.open_listener()
    try:
        with CaptureQueriesContext(connection) as queries:
            with transaction.atomic():
                for n in range(100):
                    Invoice.objects.create(number=f"2026-{n:03}", email="buyer@example.com")
                inside = notify_statements(queries)
            after = notify_statements(queries)
        heard = [n.payload for n in raw.notifies(timeout=5.0, stop_after=1)]
    finally:
        raw.close()
    assert inside == [], "nothing is said before the rows are committed"
    assert len(after) == 1, after
    assert heard == [""]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_create__a_rolled_back_transaction_says_nothing_and_the_next_one_still_wakes():
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    class Undo(Exception):
        pass

    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(Undo), transaction.atomic():
            Invoice.objects.create(number="2026-100", email="buyer@example.com")
            raise Undo
        assert notify_statements(queries) == []
        with transaction.atomic():
            try:
                with transaction.atomic():  # a savepoint rolled back: its wake-up goes with its row
                    Invoice.objects.create(number="2026-101", email="buyer@example.com")
                    raise Undo
            except Undo:
                pass
            Invoice.objects.create(number="2026-102", email="buyer@example.com")
            Invoice.objects.create(number="2026-103", email="buyer@example.com")
        assert len(notify_statements(queries)) == 1
        Invoice.objects.create(number="2026-104", email="buyer@example.com")  # autocommit: at once
        Invoice.objects.create(number="2026-105", email="buyer@example.com")
        assert len(notify_statements(queries)) == 3


def test_explain__an_attempt_whose_worker_died_has_its_line_in_the_story(clock, capsys):
    """A worker killed mid-job records no end: the story still says which attempt that was, and when
    the next claim took the job over, instead of leaving it out of the timeline."""
    from django.db.models import F

    invoice = Invoice.objects.create(number="2026-004", email="buyer@example.com")
    Invoice.objects.claim(invoice.pk, owner="killed", ttl=TTL, clock=clock, also={"attempts": F("attempts") + 1})
    clock.advance(TTL + 1)
    assert run_job("invoice", invoice.pk, owner="w2", clock=clock) == "done"
    call_command("weave_explain", "invoice", str(invoice.pk))
    out = capsys.readouterr().out
    assert "2 attempts: 1 ended, 1 never ended (its worker stopped)" in out
    (line,) = [s for s in out.splitlines() if "attempt 1" in s]
    assert "no end recorded" in line and "attempt 2" in line and "fence 2" in line
    claim_2 = JobAttempt.objects.get(job_type="invoice", job_id=str(invoice.pk), number=2).started_at
    assert line.startswith(claim_2.strftime("%Y-%m-%d %H:%M:%S"))  # placed at the takeover, by the database clock
    assert out.index("attempt 1") < out.index("attempt 2: fence 2 claimed by w2")


def test_explain__an_expired_lease_not_yet_taken_over_is_not_said_to_have_stopped(clock):
    """Its worker may only be stalled (it would still end the attempt itself, as blocked): until the next claim
    takes the job over, the story says the lease expired, not that the worker stopped."""
    from django.db.models import F

    invoice = Invoice.objects.create(number="2026-007", email="buyer@example.com")
    Invoice.objects.claim(invoice.pk, owner="stalled", ttl=TTL, clock=clock, also={"attempts": F("attempts") + 1})
    clock.advance(TTL + 1)
    from weave.jobs.explain import explain_job

    out = explain_job("invoice", Invoice, invoice.pk, clock=clock).as_text()  # expired by the test's clock
    assert "1 attempt: 0 ended, 1 not ended, its lease expired (its worker died or stalled)" in out
    assert "never ended" not in out and "stalled at fence 1, lease expired" in out


def test_explain__while_the_takeover_runs_the_killed_attempt_is_not_said_to_be_running(clock, capsys):
    """A worker killed mid-job, and the next worker's claim still running (no record of either yet): one
    lease has one holder, so the story says 1 running and 1 never ended, and names the killed attempt."""
    from django.db.models import F

    invoice = Invoice.objects.create(number="2026-006", email="buyer@example.com")
    Invoice.objects.claim(invoice.pk, owner="killed", ttl=TTL, clock=clock, also={"attempts": F("attempts") + 1})
    clock.advance(TTL + 1)
    Invoice.objects.claim(invoice.pk, owner="w2", ttl=TTL, clock=clock, also={"attempts": F("attempts") + 1})
    call_command("weave_explain", "invoice", str(invoice.pk))
    out = capsys.readouterr().out
    assert "2 attempts: 0 ended, 1 running, 1 never ended (its worker stopped)" in out
    assert "2 running" not in out
    (line,) = [s for s in out.splitlines() if "attempt 1" in s]
    assert "no end recorded" in line and "attempt 2, running now" in line and "fence 2" in line
    assert out.index("attempt 1") < out.index("w2 at fence 2, lease live")


def test_explain__a_cancelled_job_that_never_ran_is_not_said_to_be_waiting(clock, capsys):
    from weave.jobs.services import job_cancel

    invoice = Invoice.objects.create(number="2026-005", email="buyer@example.com")
    assert job_cancel(job_type="invoice", pks=[invoice.pk], clock=clock).changed == [invoice.pk]
    call_command("weave_explain", "invoice", str(invoice.pk))
    out = capsys.readouterr().out
    assert "it is cancelled" in out and "yet" not in out


def test_explain__an_id_that_is_no_number_is_refused_in_plain_words():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        call_command("weave_explain", "invoice", "abc")
    assert str(refused.value) == "No invoice with id abc: invoice ids are numbers."  # was "a invoice"


def test_explain__the_running_attempt_has_its_claim_line_at_the_claims_database_time(clock, capsys):
    """An attempt that holds the job has no record until it ends, but its claim wrote its database time
    into the row: the story shows that claim (time, fence, holder), as it does for an attempt that ended."""
    invoice = Invoice.objects.create(number="2026-007", email="buyer@example.com")
    Invoice.objects.claim(invoice.pk, owner="w1", ttl=TTL, clock=clock, also=jobs.get("invoice").claim_writes(clock))
    claimed_at = Invoice.objects.get(pk=invoice.pk).last_attempted_at
    call_command("weave_explain", "invoice", str(invoice.pk))
    out = capsys.readouterr().out
    (line,) = [s for s in out.splitlines() if "claim " in s]
    assert line.startswith(claimed_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:23])
    assert "attempt 1: fence 1 claimed by w1" in line
    assert out.index("attempt 1: fence 1 claimed by w1") < out.index("w1 at fence 1, lease live")


def test_explain__a_killed_attempt_is_dated_at_the_running_takeovers_claim(clock, capsys):
    """A worker killed mid-job and the next claim still running: the killed attempt's line stands at that
    claim's database time (copied into the row), just before the claim's own line, not undated at the end."""
    invoice = Invoice.objects.create(number="2026-008", email="buyer@example.com")
    Invoice.objects.claim(invoice.pk, owner="killed", ttl=TTL, clock=clock, also={"attempts": F("attempts") + 1})
    clock.advance(TTL + 1)
    Invoice.objects.claim(invoice.pk, owner="w2", ttl=TTL, clock=clock, also=jobs.get("invoice").claim_writes(clock))
    claimed_at = Invoice.objects.get(pk=invoice.pk).last_attempted_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]
    call_command("weave_explain", "invoice", str(invoice.pk))
    lines = capsys.readouterr().out.splitlines()
    (killed,) = [s for s in lines if "attempt 1" in s]
    (claim,) = [s for s in lines if "attempt 2: fence 2 claimed by w2" in s]
    assert killed.startswith(claimed_at) and claim.startswith(claimed_at)
    assert lines.index(killed) + 1 == lines.index(claim)

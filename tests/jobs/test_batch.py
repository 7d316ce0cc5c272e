"""The engine's batch mode: one claim per batch, guarded group finishes, and a takeover in the middle of a batch."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.contract import look_around, while_running
from weave.jobs.batch import BatchDrain, run_batches
from weave.jobs.tasks import drain as drain_jobs
from weave.models import JobAttempt, TaskRow

pytestmark = pytest.mark.django_db
TTL = 30.0


@pytest.fixture(autouse=True)
def no_hooks():
    while_running.clear()
    yield
    while_running.clear()


def _statements(queries):
    skipped = ("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT")
    return [q["sql"].lstrip() for q in queries if not q["sql"].lstrip().upper().startswith(skipped)]


def _drain_invoices(n):
    Invoice.objects.all().delete()
    JobAttempt.objects.all().delete()
    Invoice.objects.bulk_create([Invoice(number=f"N{i}", email=f"a{i}@example.com") for i in range(n)])
    with CaptureQueriesContext(connection) as queries:
        assert drain_jobs("invoice") == {"done": n}
    return _statements(queries)


def test_jobs_drain__finishes_n_rows_with_the_same_statements_whatever_n(monkeypatch):
    # 36: inside one INSERT on SQLite too (its 999 parameters, two a column a row: 38 rows of 13 columns)
    # The drain's own statements are counted. A row kept off the CPU for 0.2 s (a loaded machine) would
    # have the heartbeat's thread write the rows before it, on its own connection and outside the count.
    monkeypatch.setattr(BatchDrain, "_while_running", lambda self, seconds: None)
    few, many = _drain_invoices(2), _drain_invoices(36)
    assert len(few) == len(many)
    on_rows = [sql.upper() for sql in many if "TESTS_INVOICES_INVOICE" in sql.upper() or "INVOICE" in sql.upper()]
    claims = [sql for sql in on_rows if "UPDATE" in sql.split("SET")[0] and '"ATTEMPTS" + 1' in sql.replace("(", "")]
    finishes = [sql for sql in on_rows if "UPDATE" in sql.split("SET")[0] and '"OWNER" = NULL' in sql]
    assert len(claims) == 1 and len(finishes) == 1
    inserts = [sql for sql in many if sql.upper().startswith("INSERT") and "WEAVE_JOBATTEMPT" in sql.upper()]
    assert len(inserts) == 1
    assert Invoice.objects.filter(state="done", fence=1, owner__isnull=True).count() == 36
    assert JobAttempt.objects.filter(job_type="invoice", outcome="done").count() == 36


def test_batch__a_claim_never_takes_a_row_held_under_a_live_lease(clock):
    Invoice.objects.bulk_create([Invoice(number=f"N{i}", email="a@example.com") for i in range(3)])
    held = Invoice.objects.order_by("pk").first()
    Invoice.objects.claim(held.pk, owner="other", ttl=TTL, clock=clock)
    due = Invoice.objects.due(clock).order_by("next_attempt_at", "pk")
    report = run_batches("invoice", due, budget=60, owner="me", clock=clock)
    assert report.outcomes == {"done": 2} and report.claims == 1
    held.refresh_from_db()
    assert (held.owner, held.fence, held.state) == ("other", 1, "pending")  # untouched: still the holder's


def test_batch__a_takeover_mid_batch_finishes_none_of_the_taken_rows_and_records_them_blocked(clock):
    """Five tasks in one batch. While the third runs, the batch's lease lapses (a stall: nobody renews)
    and another worker takes over rows 1-2 (finished, not yet written), 3 (running) and 5 (not started),
    and writes its own value to each. The stale batch must write nothing to them. Row 4, not taken but
    its lease lapsed too, is not started either: a lapsed lease is never renewed."""
    results = [look_around.enqueue(f"t{i}") for i in range(5)]
    pks = [TaskRow.objects.get(result_id=r.id).pk for r in results]
    taken = [pks[0], pks[1], pks[2], pks[4]]
    seen = []

    def stall_and_take_over(context):
        seen.append(context.task_result.id)
        if len(seen) != 3:
            return
        clock.advance(TTL + 1)  # stalled past the batch's lease
        for pk in taken:
            lease = TaskRow.objects.claim(pk, owner="fresh", ttl=TTL, clock=clock)
            TaskRow.objects.guarded_update(lease, clock=clock, return_value="fresh's")

    while_running.append(stall_and_take_over)
    due = TaskRow.objects.due(clock).order_by("-priority", "next_attempt_at", "pk")
    report = run_batches("task", due, budget=60, owner="stale", clock=clock, flush_seconds=3600)

    # Rows 1, 2 (written late) and 3 (finished after the takeover) were refused; 4 and 5 never started.
    assert report.outcomes == {"blocked": 5}
    assert seen == [r.id for r in results[:3]]
    for pk in taken:
        row = TaskRow.objects.get(pk=pk)
        # 0 rows changed: the new owner's lease and value stand, nothing of the stale batch landed.
        assert (row.owner, row.fence, row.return_value, row.state) == ("fresh", 2, "fresh's", "pending")
        (attempt,) = JobAttempt.objects.filter(job_type="task", job_id=str(pk))
        assert (attempt.owner, attempt.fence, attempt.outcome) == ("stale", 1, "blocked")
        assert "fresh at fence 2" in attempt.reason
    lapsed = TaskRow.objects.get(pk=pks[3])
    assert (lapsed.state, lapsed.return_value, lapsed.fence) == ("pending", None, 1)
    assert "before it started" in JobAttempt.objects.get(job_type="task", job_id=str(pks[3])).reason
    # The next drain runs it (a takeover: a new attempt), and its stale attempt is recorded once.
    while_running.clear()
    due = TaskRow.objects.due(clock).order_by("pk")  # a fake clock's "now" is fixed in the queryset
    assert run_batches("task", due, budget=60, owner="next", clock=clock).outcomes == {"done": 1}
    lapsed = TaskRow.objects.get(pk=pks[3])
    assert (lapsed.state, lapsed.attempts, lapsed.return_value["tag"]) == ("done", 2, "t3")
    outcomes = JobAttempt.objects.filter(job_type="task", job_id=str(pks[3])).order_by("number")
    assert [(a.owner, a.outcome) for a in outcomes] == [("stale", "blocked"), ("next", "done")]


def test_batch__a_takeover_refused_at_the_finish_says_where(clock):
    result = look_around.enqueue("only")
    pk = TaskRow.objects.get(result_id=result.id).pk

    def take_over(context):
        clock.advance(TTL + 1)
        TaskRow.objects.claim(pk, owner="fresh", ttl=TTL, clock=clock)

    while_running.append(take_over)
    due = TaskRow.objects.due(clock).order_by("pk")
    assert run_batches("task", due, budget=60, owner="stale", clock=clock).outcomes == {"blocked": 1}
    attempt = JobAttempt.objects.get(job_type="task", job_id=str(pk))
    assert attempt.reason.startswith("Lease lost at the finish:") and "fresh" in attempt.reason


def test_batch__the_heartbeat_renews_every_row_waiting_or_finished_but_not_the_one_past_its_budget(clock):
    from weave.leases.batch_heartbeat import BatchHeartbeat

    Invoice.objects.bulk_create([Invoice(number=f"N{i}", email="a@example.com") for i in range(3)])
    batch, rows = Invoice.objects.due(clock).claim_rows(owner="me", ttl=TTL, limit=10, fields=(), clock=clock)
    heartbeat = BatchHeartbeat(Invoice.objects, owner="me", ttl=TTL, clock=clock, background=False)
    heartbeat.add(batch)
    first, *others = sorted(batch.fences)
    heartbeat.start(batch.lease(first), budget=5)
    clock.advance(TTL / 3)
    assert heartbeat.tick()
    clock.advance(TTL - 1)  # the first row's budget is spent: it alone is no longer renewed
    assert heartbeat.tick()
    clock.advance(2)
    live = set(Invoice.objects.live(clock).values_list("pk", flat=True))
    assert live == set(others)


def test_batch__rows_not_started_when_the_budget_ends_are_given_back_as_they_were(clock):
    results = [look_around.enqueue(f"t{i}") for i in range(3)]
    pks = [TaskRow.objects.get(result_id=r.id).pk for r in results]
    while_running.append(lambda context: clock.advance(11))  # the first task spends the drain's budget
    due = TaskRow.objects.due(clock).order_by("pk")
    report = run_batches("task", due, budget=10, owner="me", clock=clock)
    assert report.outcomes == {"done": 1} and report.more
    for pk in pks[1:]:
        row = TaskRow.objects.get(pk=pk)
        # Free again, its claim undone: no attempt counted, no start time; its fence's record says it was given back.
        assert (row.owner, row.state, row.attempts, row.started_at, row.last_attempted_at) == (
            None,
            "pending",
            0,
            None,
            None,
        )
        records = JobAttempt.objects.filter(job_type="task", job_id=str(pk))
        assert [(a.outcome, a.owner, a.fence) for a in records] == [("released", "me", 1)]
    while_running.clear()
    due = TaskRow.objects.due(clock).order_by("pk")
    assert run_batches("task", due, budget=10, owner="next", clock=clock).outcomes == {"done": 2}
    assert [TaskRow.objects.get(pk=pk).attempts for pk in pks] == [1, 1, 1]


def test_batch__a_row_with_a_shorter_lease_of_its_own_is_renewed_at_a_third_of_it(clock):
    from weave.leases.batch_heartbeat import BatchHeartbeat

    Invoice.objects.bulk_create([Invoice(number=f"N{i}", email="a@example.com") for i in range(2)])
    batch, _ = Invoice.objects.due(clock).claim_rows(owner="me", ttl=TTL, limit=10, fields=(), clock=clock)
    heartbeat = BatchHeartbeat(Invoice.objects, owner="me", ttl=TTL, clock=clock, background=False)
    heartbeat.add(batch)
    first = min(batch.fences)
    heartbeat.start(batch.lease(first), ttl=6)  # renewed to its own 6 s before it starts
    assert Invoice.objects.get(pk=first).lease_expires_at == clock.current + timedelta(seconds=6)
    clock.advance(2)
    assert heartbeat.tick()  # due at 6 / 3, not at the batch's 30 / 3
    clock.advance(5)  # 7 s after the start: the 6 s lease stands only thanks to that renewal
    assert first in set(Invoice.objects.live(clock).values_list("pk", flat=True))


def test_jobs_drain__a_step_style_type_walks_its_steps_per_row_inside_the_batch():
    from tests.jobs.shipping.models import Booking, Shipment
    from weave.models import JobStepReceipt

    shipments = [Shipment.objects.create(parcel=f"p{i}") for i in range(3)] + [Shipment.objects.create(parcel="")]
    assert drain_jobs("shipment") == {"done": 3, "failed": 1}
    for shipment in shipments[:3]:
        shipment.refresh_from_db()
        assert (shipment.state, shipment.owner, shipment.attempts) == ("done", None, 1)
        (booking,) = Booking.objects.filter(shipment=shipment)
        assert booking.written_by.startswith("shipment:")  # written under the batch's lease, by its owner
        steps = JobStepReceipt.objects.filter(job_type="shipment", job_id=str(shipment.pk))
        assert sorted(steps.values_list("step", flat=True)) == ["book", "quote"]
    refused = Shipment.objects.get(pk=shipments[3].pk)
    assert refused.state == "failed" and "no parcel to ship" in refused.last_error


def test_jobs_drain__a_result_no_json_can_keep_fails_its_own_attempt_and_the_batch_finishes(monkeypatch):
    from tests.jobs.invoices.mailer import mailer

    Invoice.objects.bulk_create([Invoice(number=f"J{i}", email=f"j{i}@example.com") for i in range(3)])
    real_send = mailer.send
    monkeypatch.setattr(
        mailer,
        "send",
        lambda to, subject, *, key: object() if to == "j1@example.com" else real_send(to, subject, key=key),
    )
    assert drain_jobs("invoice") == {"done": 2, "retry": 1}
    junk = Invoice.objects.get(email="j1@example.com")
    assert (junk.state, junk.owner) == ("pending", None)
    assert "not JSON-able" in junk.last_error
    assert set(Invoice.objects.exclude(pk=junk.pk).values_list("state", flat=True)) == {"done"}


@pytest.mark.django_db(transaction=True)
def test_batch__a_long_row_hands_the_rows_not_started_to_another_drain(monkeypatch):
    """A row that runs long gives back the batch's rows not started (their claim undone) and asks for another
    drain, so an idle worker runs them instead of their waiting behind it for the whole budget."""
    import threading

    from django_q.models import OrmQ

    from tests.jobs.invoices import mailer as mailer_module

    slow, *rest = [Invoice.objects.create(number=f"H{i}", email=f"h{i}@example.com") for i in range(3)]
    handed_on = threading.Event()
    send = mailer_module.mailer.send

    def send_slowly(to, subject, *, key):
        if subject == f"Invoice {slow.number}":
            # Waits for the others to be free again (no timing: a bound only so old code ends).
            for _ in range(200):
                if Invoice.objects.filter(pk__in=[r.pk for r in rest], owner__isnull=True).count() == len(rest):
                    handed_on.set()
                    break
                threading.Event().wait(0.05)
        return send(to, subject, key=key)

    monkeypatch.setattr(mailer_module.mailer, "send", send_slowly)
    asked_before = OrmQ.objects.count()
    assert drain_jobs("invoice") == {"done": 1}
    assert handed_on.is_set()
    for row in Invoice.objects.filter(pk__in=[r.pk for r in rest]):
        # Free again, its claim undone: no attempt counted; the fence moved on (a stale write fails), and its
        # record says who held it and that it was handed on.
        assert (row.owner, row.state, row.attempts, row.fence) == (None, "pending", 0, 1)
        records = JobAttempt.objects.filter(job_type="invoice", job_id=str(row.pk))
        assert [(a.outcome, a.fence) for a in records] == [("released", 1)]
    assert OrmQ.objects.count() > asked_before, "another drain was asked for"
    assert drain_jobs("invoice") == {"done": 2}
    assert [Invoice.objects.get(pk=r.pk).attempts for r in rest] == [1, 1]


@pytest.mark.django_db(transaction=True)
def test_batch__after_a_hand_on_the_drain_claims_one_row_at_a_time(monkeypatch):
    """Its rows run long: a whole batch claimed again would only be handed on again (one release per row)."""
    import threading

    from tests.jobs.invoices import mailer as mailer_module

    rows = [Invoice.objects.create(number=f"O{i}", email=f"o{i}@example.com") for i in range(5)]
    first_batch = [r.pk for r in rows[1:3]]
    send = mailer_module.mailer.send

    def send_slowly(to, subject, *, key):
        if subject == f"Invoice {rows[0].number}":
            for _ in range(200):  # until the rest of its batch is free again (a bound only so old code ends)
                if Invoice.objects.filter(pk__in=first_batch, owner__isnull=True).count() == len(first_batch):
                    break
                threading.Event().wait(0.05)
        return send(to, subject, key=key)

    monkeypatch.setattr(mailer_module.mailer, "send", send_slowly)
    asked = []
    due = Invoice.objects.due().order_by("pk")
    report = run_batches("invoice", due, budget=60, limit=3, on_full=lambda: asked.append(1))
    assert report.outcomes == {"done": 5}
    # One claim of 3 (the slow row and the 2 handed on), then one row per claim, and one that found none.
    assert report.claims == 1 + 4 + 1, report.claims
    assert asked, "another drain was asked for"
    assert [Invoice.objects.get(pk=r.pk).attempts for r in rows] == [1] * 5

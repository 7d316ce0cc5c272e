"""PostgreSQL, real time: a worker's COMMIT lands and its reply is lost; the link drops right after.

The worker cannot know whether its write landed. Worker A's connections go through the silent proxy;
right before the chosen COMMIT the proxy starts holding every reply, the test sees (directly) that
the COMMIT landed, and then drops A's links. A must read back on a fresh connection what landed and
act on it: a finish that landed is its ending (no give-back, no second run, no second record); a
step whose save landed is skipped by the next attempt, never redone.
"""

import pytest

from tests.jobs.invoices.mailer import mailer
from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.carrier import carrier, during_booking
from tests.jobs.shipping.models import Booking, Shipment
from tests.partitions.conftest import TTL, run_in_thread
from weave.jobs.batch import run_batches
from weave.jobs.runner import run_job
from weave.models import JobAttempt, JobStepReceipt

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
SHIPMENTS = Shipment._meta.db_table
INVOICES = Invoice._meta.db_table
BOOKINGS = Booking._meta.db_table


@pytest.fixture(autouse=True)
def short_leases(settings, worker_limits):
    settings.WEAVE = {**worker_limits, "LEASE_TTL": TTL, "SHIPPING_LEASE_TTL": TTL}
    during_booking.clear()
    carrier.reset()
    yield
    during_booking.clear()


def _ended(thread, result):
    thread.join(30)
    assert not thread.is_alive() and "error" not in result, result.get("traceback", result)
    return result["value"]


def _attempts(job_type, pk):
    rows = JobAttempt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("fence")
    return list(rows.values_list("owner", "fence", "outcome", "reason"))


def test_reply_lost_at_the_finish__the_finish_landed_so_a_records_nothing_more_and_runs_nothing_again(cut_off):
    shipment = Shipment.objects.create(parcel="box")
    cut = cut_off("worker-a", "heartbeat-")
    # The guarded finish (release and attempt record) commits; its reply never comes back.
    cut.lose_reply_at_commit(rf'UPDATE "{SHIPMENTS}" SET "owner" = NULL', thread_prefix="worker-a")
    thread, result = run_in_thread("worker-a", lambda: run_job("shipment", shipment.pk, owner="worker-a"))
    cut.drop_after_landed(lambda: Shipment.objects.filter(pk=shipment.pk, state="done").exists())

    assert _ended(thread, result) == "done"
    # One attempt, one record, the one the finish wrote: no retry, no give-back, no second ending.
    [(owner, fence, outcome, _)] = _attempts("shipment", shipment.pk)
    assert (owner, fence, outcome) == ("worker-a", 1, "done")
    shipment.refresh_from_db()
    assert (shipment.state, shipment.fence, shipment.owner, shipment.attempts) == ("done", 1, None, 1)
    # Nothing runs it again: it is not due, and the carrier was called once.
    assert run_job("shipment", shipment.pk, owner="worker-b") == "not due"
    assert len(carrier.calls) == 1 and Booking.objects.count() == 1


def test_reply_lost_at_a_step_save__the_save_landed_and_the_next_attempt_resumes_after_that_step(cut_off):
    shipment = Shipment.objects.create(parcel="box")
    cut = cut_off("worker-a", "heartbeat-")
    # The save of step book (its guarded update, the booking and the receipt) commits; its reply is lost.
    cut.lose_reply_at_commit(rf'INSERT INTO "{BOOKINGS}"', thread_prefix="worker-a")
    thread, result = run_in_thread("worker-a", lambda: run_job("shipment", shipment.pk, owner="worker-a"))
    receipts = JobStepReceipt.objects.filter(job_type="shipment", job_id=str(shipment.pk))
    cut.drop_after_landed(lambda: receipts.filter(step="book").exists())

    # A's lease is still its own: it gives the job back, saying the save had landed.
    assert _ended(thread, result) == "retry"
    [(owner, fence, outcome, reason)] = _attempts("shipment", shipment.pk)
    assert (owner, fence, outcome) == ("worker-a", 1, "retry")
    assert "Cut off from the database at step book" in reason and "the save of step book had landed" in reason
    # The next attempt skips both saved steps: no second booking, no second carrier call.
    assert run_job("shipment", shipment.pk, owner="worker-b") == "done"
    assert [row[:3] for row in _attempts("shipment", shipment.pk)] == [
        ("worker-a", 1, "retry"),
        ("worker-b", 2, "done"),
    ]
    assert set(receipts.values_list("step", "fence")) == {("quote", 1), ("book", 1)}
    assert list(Booking.objects.values_list("written_by", flat=True)) == ["worker-a"]
    assert len(carrier.calls) == 1
    shipment.refresh_from_db()
    assert (shipment.state, shipment.fence, shipment.owner) == ("done", 2, None)


def test_reply_lost_at_a_batch_group_finish__the_finishes_landed_and_nothing_runs_or_records_again(cut_off):
    invoices = [Invoice.objects.create(number=f"N{i}", email=f"a{i}@example.com") for i in range(3)]
    mailer.calls.clear()
    cut = cut_off("worker-a", "batch-heartbeat-")
    # The group finish (the guarded release of all three rows and their records) commits; its reply is lost.
    cut.lose_reply_at_commit(rf'UPDATE "{INVOICES}" AS n SET', thread_prefix="worker-a")
    due = Invoice.objects.due().order_by("pk")
    thread, result = run_in_thread("worker-a", lambda: run_batches("invoice", due, owner="worker-a", budget=30))
    cut.drop_after_landed(lambda: Invoice.objects.filter(state="done").count() == 3)

    report = _ended(thread, result)
    assert report.outcomes == {"done": 3}
    for invoice in invoices:
        [(owner, _, outcome, _)] = _attempts("invoice", invoice.pk)
        assert (owner, outcome) == ("worker-a", "done")
        invoice.refresh_from_db()
        assert (invoice.state, invoice.owner, invoice.attempts) == ("done", None, 1)
        assert run_job("invoice", invoice.pk, owner="worker-b") == "not due"
    assert len(mailer.calls) == 3


def test_reply_lost_at_a_task_drains_group_finish__each_task_is_told_finished_once_and_runs_once(cut_off):
    from tests.jobs.shipping.background import add
    from weave.models import TaskRow
    from weave.tasks.compat import TaskResultStatus, task_finished
    from weave.tasks.worker import drain

    heard = []

    def record(sender, task_result, **kwargs):
        heard.append((task_result.id, task_result.status, task_result.return_value))

    results = [add.enqueue(i, 1) for i in range(3)]
    cut = cut_off("worker-a", "batch-heartbeat-")
    cut.lose_reply_at_commit(rf'UPDATE "{TaskRow._meta.db_table}" AS n SET', thread_prefix="worker-a")
    task_finished.connect(record, weak=False)
    try:
        thread, outcome = run_in_thread("worker-a", drain)
        cut.drop_after_landed(lambda: TaskRow.objects.filter(state="done").count() == 3)
        # The drain's report and its `task_finished` receivers say what landed: three tasks done, once each.
        assert _ended(thread, outcome) == {"done": 3}
    finally:
        task_finished.disconnect(record)
    assert sorted(heard) == sorted((r.id, TaskResultStatus.SUCCESSFUL, i + 1) for i, r in enumerate(results))
    for result in results:
        result.refresh()
        assert (result.status, result.attempts) == (TaskResultStatus.SUCCESSFUL, 1)
    # One record per task, the drain's own finish (one owner), done: none stale, none twice.
    records = list(JobAttempt.objects.filter(job_type="task").values_list("job_id", "outcome", "owner"))
    assert sorted(row[:2] for row in records) == sorted(
        (str(pk), "done") for pk in TaskRow.objects.values_list("pk", flat=True)
    )
    assert len({row[2] for row in records}) == 1
    assert drain() == {}  # nothing is due again


def test_reply_lost_at_an_onboarding_step_save__the_run_is_given_back_and_resumes_after_that_step(cut_off):
    from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
    from onboarding.runner import run_onboarding
    from onboarding.steps import Step
    from tests.factories import OnboardingRunFactory

    runs = OnboardingRun._meta.db_table
    did = []
    steps = (
        Step("alpha", "Alpha", work=lambda ctx: did.append(("alpha", ctx.lease.owner)) or {}),
        Step("beta", "Beta", work=lambda ctx: did.append(("beta", ctx.lease.owner)) or {}),
    )
    run = OnboardingRunFactory()
    cut = cut_off("worker-a", "heartbeat-")
    # alpha's save (the guarded phase save and its receipt) commits; its reply is lost.
    cut.lose_reply_at_commit(rf'UPDATE "{runs}" SET "phase"', thread_prefix="worker-a")
    thread, result = run_in_thread(
        "worker-a", lambda: run_onboarding(run.pk, owner="worker-a", ttl=TTL, steps=steps, background=False)
    )
    cut.drop_after_landed(lambda: StepReceipt.objects.filter(run=run, step="alpha").exists())

    # A's lease is still its own: it gives the run back, saying the save had landed.
    assert _ended(thread, result) == "released"
    (a,) = RunAttempt.objects.filter(run=run)
    assert (a.owner, a.outcome) == ("worker-a", "released")
    assert "Cut off from the database at alpha" in a.reason and "its save of alpha had landed" in a.reason
    # The next attempt starts after alpha: alpha's work ran once, its receipt is A's.
    assert run_onboarding(run.pk, owner="worker-b", ttl=30, steps=steps, background=False) == "completed"
    assert did == [("alpha", "worker-a"), ("beta", "worker-b")]
    assert set(StepReceipt.objects.filter(run=run).values_list("step", "owner")) == {
        ("alpha", "worker-a"),
        ("beta", "worker-b"),
    }
    run.refresh_from_db()
    assert (run.status, run.owner) == ("completed", None)


def test_reply_lost_at_an_onboarding_completion__the_attempt_says_completed_and_nothing_more(cut_off):
    from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
    from onboarding.runner import run_onboarding
    from onboarding.steps import Step
    from tests.factories import OnboardingRunFactory

    runs = OnboardingRun._meta.db_table
    steps = (Step("alpha", "Alpha"),)
    run = OnboardingRunFactory()
    cut = cut_off("worker-a", "heartbeat-")
    # The completion (the guarded release and the attempt's ending) commits; its reply is lost.
    cut.lose_reply_at_commit(rf'UPDATE "{runs}" SET "owner" = NULL', thread_prefix="worker-a")
    thread, result = run_in_thread(
        "worker-a", lambda: run_onboarding(run.pk, owner="worker-a", ttl=TTL, steps=steps, background=False)
    )
    cut.drop_after_landed(lambda: OnboardingRun.objects.filter(pk=run.pk, status="completed").exists())

    assert _ended(thread, result) == "completed"
    (a,) = RunAttempt.objects.filter(run=run)
    assert (a.owner, a.outcome) == ("worker-a", "completed")
    assert StepReceipt.objects.filter(run=run).count() == 1
    assert run_onboarding(run.pk, owner="worker-b", ttl=30, steps=steps, background=False) == "not_claimable"


def test_reply_lost_at_a_push_group_finish__the_delivered_rows_are_not_sent_again_nor_recorded_twice(
    push_settings, fake, cut_off
):
    from datetime import timedelta

    from django.db import connection

    from notifications.delivery import deliver_batch
    from notifications.models import DeliveryAttempt, Notification
    from notifications.signals import notification_delivered
    from tests.factories import NotificationFactory

    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
    NotificationFactory.create_batch(3, next_attempt_at=now - timedelta(seconds=1))
    heard = []

    def record(sender, notification, **kwargs):
        heard.append(notification.pk)

    cut = cut_off("push-a")
    # A's group finish (the guarded release of the rows, their attempt rows) commits; its reply is lost.
    cut.lose_reply_at_commit(rf'UPDATE "{Notification._meta.db_table}".*(CASE WHEN|FROM \(VALUES|FROM unnest)')
    notification_delivered.connect(record, weak=False)
    try:
        thread, result = run_in_thread("push-a", lambda: deliver_batch(owner="push-a", ttl=TTL, batch_size=3))
        # The sends answer at their own pace: the finish whose reply is lost may hold one row or all three.
        cut.drop_after_landed(lambda: Notification.objects.filter(status="delivered").exists())
        thread.join(30)
    finally:
        notification_delivered.disconnect(record)
    assert not thread.is_alive() and "error" not in result, result.get("traceback", result)
    # A's report and the `notification_delivered` receivers say what landed: three delivered, once each.
    assert (result["value"].delivered, result["value"].lease_lost) == (3, 0)
    assert sorted(heard) == sorted(Notification.objects.values_list("pk", flat=True))

    # Each row: delivered by A, one attempt record (A's own, delivered), no stale `lease_lost` beside it.
    assert set(Notification.objects.values_list("fence", "owner", "status")) == {(1, None, "delivered")}
    records = sorted(DeliveryAttempt.objects.values_list("notification_id", "owner", "outcome"))
    assert records == sorted((pk, "push-a", "delivered") for pk in Notification.objects.values_list("pk", flat=True))
    # Nothing is due again, and the provider delivered each message once.
    assert deliver_batch(owner="push-b", ttl=30, batch_size=3).claimed == 0
    assert fake.stats()["unique_deliveries"] == 3 and fake.stats()["requests"] == 3


def test_link_drops_right_after_a_push_group_finish_landed__read_back_on_a_fresh_connection(
    push_settings, fake, cut_off
):
    """The group finish's COMMIT lands and its reply arrives; the link drops before the on-commit signals
    read the rows. The completer must read back what landed on a fresh connection (not on the dead one,
    which fails with "the connection is closed"): nothing is sent or recorded twice, each row is told once."""
    from datetime import timedelta

    from django.db import connection

    from notifications.delivery import deliver_batch
    from notifications.models import DeliveryAttempt, Notification
    from notifications.signals import notification_delivered
    from tests.factories import NotificationFactory

    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
    NotificationFactory.create_batch(3, next_attempt_at=now - timedelta(seconds=1))
    heard = []

    def record(sender, notification, **kwargs):
        heard.append(notification.pk)

    cut = cut_off("push-a")
    cut.drop_after_commit(rf'UPDATE "{Notification._meta.db_table}".*(CASE WHEN|FROM \(VALUES|FROM unnest)')
    notification_delivered.connect(record, weak=False)
    try:
        thread, result = run_in_thread("push-a", lambda: deliver_batch(owner="push-a", ttl=TTL, batch_size=3))
        thread.join(30)
    finally:
        notification_delivered.disconnect(record)
    assert cut.fired.is_set() and cut.proxy.cuts == 1
    assert not thread.is_alive() and "error" not in result, result.get("traceback", result)
    assert (result["value"].delivered, result["value"].lease_lost) == (3, 0)
    assert sorted(heard) == sorted(Notification.objects.values_list("pk", flat=True))
    assert set(Notification.objects.values_list("fence", "owner", "status")) == {(1, None, "delivered")}
    records = sorted(DeliveryAttempt.objects.values_list("notification_id", "owner", "outcome"))
    assert records == sorted((pk, "push-a", "delivered") for pk in Notification.objects.values_list("pk", flat=True))
    assert deliver_batch(owner="push-b", ttl=30, batch_size=3).claimed == 0
    assert fake.stats()["unique_deliveries"] == 3 and fake.stats()["requests"] == 3

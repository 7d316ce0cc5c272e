"""weave.retention: what is purged (and what never is), bounded fenced batches, resuming, the lease
refusing a stale purge, counters that never go down, and the backlog the dashboard and metrics read."""

from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.utils import timezone

from notifications import console
from notifications.models import BreakerOpening, DeliveryAttempt, Notification
from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from tests.factories import NotificationFactory, OnboardingRunFactory
from weave import retention
from weave.metrics import collect_retention_metrics
from weave.models import PurgedCount, PurgeState

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def aged(days: float):
    return timezone.now() - days * DAY


def finished_notification(days_ago: float, status: str = "delivered", attempts: int = 1) -> Notification:
    n = NotificationFactory(status=status)
    last = aged(days_ago) + timedelta(seconds=max(attempts - 1, 0))
    Notification.objects.filter(pk=n.pk).update(created_at=aged(days_ago), finished_at=last)
    for i in range(attempts):
        at = aged(days_ago) + timedelta(seconds=i)
        DeliveryAttempt.objects.create(
            notification=n,
            owner="w",
            fence=i + 1,
            started_at=at,
            finished_at=at,
            outcome="temporary",
            reason="Provider answered HTTP 503; retried later.",  # a retried attempt always says why
        )
    return n


def test_purge__deletes_finished_history_past_retention_and_keeps_pending_and_recent_rows():
    old = [finished_notification(40, status) for status in ("delivered", "failed", "cancelled", "expired")]
    pending_old = NotificationFactory(status="pending")
    Notification.objects.filter(pk=pending_old.pk).update(created_at=aged(400))
    recent = finished_notification(5)
    BreakerOpening.objects.create(opened_at=aged(100), owner="w", reason="old")
    kept_opening = BreakerOpening.objects.create(opened_at=aged(10), owner="w", reason="recent")

    report = retention.purge()

    assert report.stopped == ""
    assert not Notification.objects.filter(pk__in=[n.pk for n in old]).exists()
    assert set(Notification.objects.values_list("pk", flat=True)) == {pending_old.pk, recent.pk}
    assert list(DeliveryAttempt.objects.values_list("notification_id", flat=True)) == [recent.pk]
    assert list(BreakerOpening.objects.all()) == [kept_opening]
    assert report.deleted == {"attempts": 4, "notifications": 4, "breaker_openings": 1}
    state = PurgeState.objects.get()
    assert state.owner is None and state.deleted == 9 and state.last_outcome.startswith("finished")


def test_purge__a_kind_set_to_none_is_kept_forever_and_each_kind_has_its_own_period(settings):
    settings.WEAVE = {"RETENTION": {"notifications": None, "attempts": 3}}
    n = finished_notification(40, attempts=2)
    young = finished_notification(2)
    retention.purge()
    assert Notification.objects.filter(pk__in=[n.pk, young.pk]).count() == 2  # notifications kept forever
    assert DeliveryAttempt.objects.filter(notification=n).count() == 0  # its attempts were older than 3 days
    assert DeliveryAttempt.objects.filter(notification=young).count() == 1


def test_purge__deletes_in_bounded_batches_and_a_stopped_purge_resumes(settings):
    for _ in range(7):
        finished_notification(40, attempts=0)
    first = retention.purge(batch=3, budget=0.0)  # stopped before its first batch: nothing half done
    assert first.stopped.startswith("budget spent") and Notification.objects.count() == 7
    second = retention.purge(batch=3)
    assert second.batches == 3 and second.deleted == {"notifications": 7}  # 3 + 3 + 1 rows
    assert Notification.objects.count() == 0


def test_purge__refuses_while_another_purge_holds_the_lease_and_a_stale_batch_deletes_nothing():
    finished_notification(40)
    holder = retention._claim("purge:other", ttl=60)
    assert holder is not None
    report = retention.purge(owner="purge:me")
    assert report.stopped == "another purge holds the lease" and Notification.objects.count() == 1
    # A purge whose lease was taken over: its batch's guarded renewal refuses, and the delete rolls back.
    with pytest.raises(retention.LeaseLost):
        retention._renew("purge:me", holder, ttl=60, deleted=1)
    assert PurgeState.objects.get().owner == "purge:other"


def test_purge__a_purge_that_loses_its_lease_midway_stops_and_its_batch_does_not_land(monkeypatch):
    for _ in range(4):
        finished_notification(40, attempts=0)
    real = retention._renew
    calls = []

    def taken_over_after_one(owner, fence, ttl, deleted):
        calls.append(fence)
        if len(calls) == 2:  # another purge took the lease between our batches
            PurgeState.objects.update(owner="purge:other", fence=fence + 1)
        real(owner, fence, ttl, deleted)

    monkeypatch.setattr(retention, "_renew", taken_over_after_one)
    report = retention.purge(batch=2)
    assert "no longer" in report.stopped
    assert Notification.objects.count() == 2  # the first batch landed, the refused one did not
    assert sum(PurgedCount.objects.filter(kind="notifications").values_list("count", flat=True)) == 2


def test_purge__onboarding_runs_go_with_their_attempts_and_receipts_and_active_runs_stay():
    done = OnboardingRunFactory()
    OnboardingRun.objects.filter(pk=done.pk).update(status="completed", finished_at=aged(400))
    RunAttempt.objects.create(
        run=done, fence=1, owner="w", started_at=aged(400), ended_at=aged(400), outcome="completed"
    )
    StepReceipt.objects.create(run=done, step="verify_tax_id", fence=1, owner="w", completed_at=aged(400))
    active = OnboardingRunFactory()
    OnboardingRun.objects.filter(pk=active.pk).update(created_at=aged(400))
    report = retention.purge()
    assert list(OnboardingRun.objects.values_list("pk", flat=True)) == [active.pk]
    assert not RunAttempt.objects.exists() and not StepReceipt.objects.exists()
    assert report.deleted["runs"] == 1 and report.deleted["receipts"] == 1


def test_metrics_counters__never_go_down_when_history_is_purged():
    finished_notification(40, attempts=3)
    BreakerOpening.objects.create(opened_at=aged(100), owner="w", reason="old")
    console._attempts.reset()
    before = console._attempts_between(None, timezone.now())
    retention.purge()
    console._attempts.reset()  # a fresh process counts from scratch after the purge
    after = console._attempts_between(None, timezone.now())
    assert before == after == {("temporary",): 3}
    openings = {m.name: m for m in console.collect_metrics()}["weave_breaker_openings"]
    assert openings.samples[0].value == 1


def test_backlog_and_progress__are_what_the_dashboard_and_metrics_show():
    finished_notification(40, attempts=2)
    due = retention.backlog()
    assert due["notifications"]["due"] == 1 and due["attempts"]["due"] == 2 and due["notifications"]["days"] == 30
    metrics = {m.name: m for m in collect_retention_metrics()}
    assert {s.labels["kind"]: s.value for s in metrics["weave_retention_backlog"].samples}["attempts"] == 2
    retention.purge()
    assert retention.backlog()["attempts"] == {"days": 30, "due": 0, "capped": False, "purged": 2}
    assert retention.progress()["running"] is False and retention.progress()["deleted"] == 3


def test_check__refuses_an_unknown_kind_or_a_period_that_is_not_positive_days(settings):
    settings.WEAVE = {"RETENTION": {"attempt": 30, "runs": 0}}
    messages = [m.msg for m in run_checks() if m.id == "weave.E044"]
    assert len(messages) == 2 and "unknown kind 'attempt'" in messages[0] and "'runs'" in messages[1]


def test_purge__wake_request_rows_not_asked_for_within_the_period_go():
    from weave.models import WakeRequest

    WakeRequest.objects.create(name="onboarding.run:1@weave", queued_until=aged(8))
    WakeRequest.objects.create(name="notifications.drain@weave", queued_until=aged(0.01))
    assert retention.purge().deleted == {"wake_requests": 1}
    assert list(WakeRequest.objects.values_list("name", flat=True)) == ["notifications.drain@weave"]


# --- by finish time, and never a row that changed since it was picked -----------------------------------


def test_purge__a_push_scheduled_45_days_ahead_and_delivered_today_is_kept_with_its_attempt(push_settings, fake):
    from notifications.delivery import deliver_batch

    row = NotificationFactory(status="pending")
    Notification.objects.filter(pk=row.pk).update(created_at=aged(45), next_attempt_at=aged(0.001))
    assert deliver_batch(owner="worker-a", ttl=30).delivered == 1  # the real finish writes finished_at

    report = retention.purge()

    row.refresh_from_db()
    assert row.status == "delivered" and row.finished_at is not None and row.finished_at > aged(0.01)
    assert DeliveryAttempt.objects.filter(notification=row).count() == 1
    assert "notifications" not in report.deleted and "attempts" not in report.deleted


def test_purge__an_operator_retry_landing_between_pick_and_delete_keeps_the_row_and_its_attempts(monkeypatch):
    from notifications.services import notification_retry_now

    retried = finished_notification(40, status="failed", attempts=2)
    gone = finished_notification(40, status="failed", attempts=1)
    real = retention._delete_batch
    picked = []

    def retry_lands_first(spec, before, pks, report):
        picked.append((spec.kind, list(pks)))
        if len(picked) == 1:  # the first batch was picked; the operator's retry commits before it is deleted
            assert notification_retry_now(notification_ids=[retried.pk]).changed == [retried.pk]
        real(spec, before, pks, report)

    monkeypatch.setattr(retention, "_delete_batch", retry_lands_first)
    report = retention.purge()

    retried_attempts = set(DeliveryAttempt.objects.filter(notification=retried).values_list("pk", flat=True))
    assert picked[0][0] == "attempts" and retried_attempts < set(picked[0][1])  # picked while it was failed
    retried.refresh_from_db()
    assert retried.status == "pending" and retried.finished_at is None
    assert DeliveryAttempt.objects.filter(notification=retried).count() == 2  # its history stays with it
    assert not Notification.objects.filter(pk=gone.pk).exists()
    assert report.deleted == {"attempts": 1, "notifications": 1}


def test_purge__a_finished_row_a_worker_still_holds_is_kept():
    held = finished_notification(40, attempts=1)
    Notification.objects.filter(pk=held.pk).update(owner="worker-a", fence=1, lease_expires_at=timezone.now() + DAY)

    report = retention.purge()

    assert Notification.objects.filter(pk=held.pk).exists() and DeliveryAttempt.objects.count() == 1
    assert report.deleted == {}


def test_purge__attempts_of_a_pending_row_are_never_purged_however_old():
    row = finished_notification(400, status="pending", attempts=3)
    Notification.objects.filter(pk=row.pk).update(finished_at=None)

    retention.purge()

    assert DeliveryAttempt.objects.filter(notification=row).count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_purge__a_row_locked_by_a_retry_in_flight_is_skipped_and_the_retry_lands():
    import threading

    from django.db import connection, transaction

    row = finished_notification(40, status="failed", attempts=1)
    locked, purged = threading.Event(), threading.Event()

    def operator():
        try:
            with transaction.atomic():
                Notification.objects.select_for_update().filter(pk=row.pk).update(status="pending", finished_at=None)
                locked.set()
                purged.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=operator)
    thread.start()
    assert locked.wait(30)
    report = retention.purge()
    purged.set()
    thread.join(30)

    row.refresh_from_db()
    assert row.status == "pending" and DeliveryAttempt.objects.filter(notification=row).count() == 1
    assert report.deleted == {}


def test_purge__a_sites_finished_jobs_go_with_their_attempts_and_receipts_by_finish_time():
    from tests.jobs.shipping.models import Booking, Shipment
    from weave.models import JobAttempt, JobStepReceipt

    def shipment(state, finished_days, owner=None):
        s = Shipment.objects.create(parcel="p")
        finished = aged(finished_days) if finished_days is not None else None
        Shipment.objects.filter(pk=s.pk).update(state=state, finished_at=finished, created_at=aged(400), owner=owner)
        mine = {"job_type": "shipment", "job_id": str(s.pk), "owner": "w", "fence": 1, "finished_at": aged(400)}
        JobAttempt.objects.create(**mine, number=1, outcome="done", started_at=aged(400))
        JobStepReceipt.objects.create(**mine, epoch=0, step="book", attempt=1, idempotency_key=f"k{s.pk}")
        return s

    old = shipment("done", 40)
    recent = shipment("done", 5)
    pending = shipment("pending", None)
    booked = shipment("done", 40)
    Booking.objects.create(shipment=booked, carrier_ref="r", written_by="w")

    report = retention.purge()

    assert set(Shipment.objects.values_list("pk", flat=True)) == {recent.pk, pending.pk, booked.pk}
    assert not JobAttempt.objects.filter(job_id=str(old.pk)).exists()
    assert JobAttempt.objects.count() == JobStepReceipt.objects.count() == 3
    assert report.deleted == {"jobs:shipment": 1, "job_attempts": 1, "job_receipts": 1}


def test_purge__releases_its_own_lease_when_done_so_the_next_purge_starts_at_once():
    finished_notification(40)
    first = retention.purge(owner="purge:first")
    state = PurgeState.objects.get()
    assert (state.owner, state.lease_expires_at, state.fence) == (None, None, first.fence)
    assert state.last_outcome.startswith("finished")
    second = retention.purge(owner="purge:second")
    assert second.stopped == "" and second.fence == first.fence + 1


def test_purge__a_stale_purges_release_never_frees_the_new_holders_lease():
    stale = retention._claim("purge:stale", ttl=60)
    PurgeState.objects.update(lease_expires_at=timezone.now() - DAY)  # its lease ran out while it stalled
    holder = retention._claim("purge:holder", ttl=60)
    assert holder == stale + 1
    before = PurgeState.objects.values("owner", "fence", "lease_expires_at", "last_outcome").get()

    retention._release("purge:stale", stale, "finished; deleted 0 rows")  # it wakes up and finishes

    assert PurgeState.objects.values("owner", "fence", "lease_expires_at", "last_outcome").get() == before
    assert retention.purge(owner="purge:third").stopped == "another purge holds the lease"

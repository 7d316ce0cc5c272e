"""Concurrent sends within a worker, and (PostgreSQL) two workers draining the same backlog."""

import threading

import pytest
from django.db import connections

from notifications.delivery import Hooks, deliver_batch, drain
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory
from tests.threads import run_threads
from weave.leases import DatabaseClock


@pytest.mark.django_db
def test_batch_sends_many_requests_at_once(push_settings, fake, clock):
    fake.configure(latency_ms=200)
    NotificationFactory.create_batch(50, next_attempt_at=clock.current)
    report = deliver_batch(clock=clock, concurrency=10)
    stats = fake.stats()
    assert report.delivered == 50, report
    # The server saw requests overlapping: a slow request does not hold back the next. (Ideally 10;
    # a loaded two-core CI box may start a few threads late, so the bar is half of that.)
    assert 5 <= stats["max_in_flight"] <= 10, stats["max_in_flight"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers__every_notification_delivered_exactly_once(push_settings, fake):
    fake.configure(latency_ms=5)
    NotificationFactory.create_batch(300, next_attempt_at=None)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())
    reports: dict[str, object] = {}

    def worker(name: str) -> None:
        reports[name] = drain(owner=name, batch_size=10, concurrency=5, enqueue_more=False)

    run_threads(worker, ["worker-a", "worker-b"])
    assert set(Notification.objects.values_list("status", flat=True)) == {"delivered"}
    stats = fake.stats()
    assert stats["unique_deliveries"] == stats["requests"] == 300
    assert set(stats["per_key"].values()) == {1}
    assert {str(k) for k in Notification.objects.values_list("idempotency_key", flat=True)} == set(
        stats["delivered_keys"]
    )
    # No row finished twice: one attempt per row, delivered, written at the row's only fence.
    assert DeliveryAttempt.objects.count() == 300
    assert set(DeliveryAttempt.objects.values_list("outcome", "fence")) == {("delivered", 1)}
    assert reports["worker-a"].delivered > 0 and reports["worker-b"].delivered > 0
    assert reports["worker-a"].delivered + reports["worker-b"].delivered == 300


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_slow_request__batch_lease_is_renewed_in_real_time_so_nobody_takes_the_row(push_settings, fake):
    # Real HTTP latency (1.5 s) longer than the lease (1 s): only renewals keep the row ours.
    fake.configure(latency_ms=1500)
    row = NotificationFactory()
    Notification.objects.update(next_attempt_at=DatabaseClock().now())
    stolen: list = []
    done = threading.Event()

    def rival() -> None:
        try:
            while not done.is_set():
                stolen.extend(Notification.objects.due().claim_batch(owner="rival", ttl=60, limit=10).fences)
                done.wait(0.05)
        finally:
            connections.close_all()

    thread = threading.Thread(target=rival)
    try:
        # The rival starts once the row is ours, and keeps trying to claim it for the whole request.
        report = deliver_batch(ttl=1.0, owner="slow", hooks=Hooks(before_send=lambda _pk: thread.start()))
    finally:
        done.set()
        thread.join()
    assert stolen == []
    assert (report.delivered, report.lease_lost) == (1, 0)
    row.refresh_from_db()
    assert (row.status, row.fence) == ("delivered", 1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_sends_keep_flowing_while_a_finish_is_being_written(push_settings, fake):
    # The completer writes on its own thread: a slow first finish must not stop the sends behind it.
    NotificationFactory.create_batch(30, next_attempt_at=None)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())
    seen: dict[str, bool] = {}

    def slow_first_finish(_pks):
        if seen:
            return
        deadline = threading.Event()
        for _ in range(200):  # up to 10 s for the other rows to go out meanwhile
            if fake.stats()["requests"] >= 20:
                break
            deadline.wait(0.05)
        seen["sent_meanwhile"] = fake.stats()["requests"] >= 20

    report = drain(batch_size=30, concurrency=5, enqueue_more=False, hooks=Hooks(before_finish=slow_first_finish))
    assert seen == {"sent_meanwhile": True}
    assert report.delivered == 30 and set(Notification.objects.values_list("status", flat=True)) == {"delivered"}
    assert DeliveryAttempt.objects.count() == 30


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_lingering_drain_sends_a_row_created_after_it_ran_dry(push_settings, fake):
    # At low load the next row goes out from the drain that is still looking, not from a new drain the
    # broker hands out later.
    NotificationFactory(next_attempt_at=DatabaseClock().now())

    def later() -> None:
        try:
            NotificationFactory(next_attempt_at=DatabaseClock().now())
        finally:
            connections.close_all()

    timer = threading.Timer(0.3, later)
    timer.start()
    try:
        report = drain(linger=2.0, enqueue_more=False)
    finally:
        timer.join()
    assert report.delivered == 2 and report.batches == 2
    assert set(DeliveryAttempt.objects.values_list("owner", flat=True)) == {report.owner}

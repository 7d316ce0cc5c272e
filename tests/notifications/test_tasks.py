"""The django-q2 entry points are thin: they run a drain and return its report."""

import threading

import pytest
from django.db import connection

from notifications import tasks
from notifications.models import DeliveryAttempt, Notification
from notifications.services import notification_create
from notifications.signals import notification_delivered
from tests.factories import NotificationFactory
from weave import wake
from weave.leases import DatabaseClock
from weave.wake import Watcher

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("entry_point", [tasks.drain, tasks.sweep])
def test_task__delivers_due_rows_and_returns_the_report(push_settings, fake, entry_point):
    NotificationFactory.create_batch(3)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())
    report = entry_point()
    assert report["delivered"] == 3 and report["claimed"] == 3
    assert fake.stats()["unique_deliveries"] == 3
    assert entry_point()["claimed"] == 0  # nothing due any more


@pytest.mark.django_db(transaction=True)
def test_drain__a_row_created_during_the_linger_goes_out_on_the_same_pipeline(push_settings, fake, settings):
    # Each delivery creates the next row (after its finish committed, so while the drain lingers): the
    # task must deliver all of them with one drain, one owner, one sender and its open connection,
    # instead of building a drain for every row it finds. On PostgreSQL this process's watcher hears
    # each row's request (the slot is held) and hands it to the lingering drain; SQLite finds it by polling.
    settings.WEAVE = {**settings.WEAVE, "WAKE_LINGER": 3.0}
    chain = 3
    created: list[int] = []

    def next_row(sender, notification, **kwargs) -> None:
        if len(created) < chain:
            created.append(notification_create(device_token=f"chain-{len(created)}", title="Hi", body="next").pk)

    watcher = Watcher([])
    listening = threading.Thread(target=watcher.run, daemon=True)
    if connection.vendor == "postgresql":
        listening.start()
    notification_delivered.connect(next_row, weak=False)
    try:
        created.append(notification_create(device_token="chain-start", title="Hi", body="first").pk)
        report = tasks.drain()
    finally:
        notification_delivered.disconnect(next_row)
        watcher.stop()
        if listening.is_alive():
            listening.join(timeout=10)
    assert len(created) == chain
    assert report["delivered"] == chain and report["batches"] == chain  # each row claimed as it came
    attempts = DeliveryAttempt.objects.filter(notification_id__in=created)
    assert set(attempts.values_list("owner", flat=True)) == {report["owner"]}
    assert set(Notification.objects.filter(pk__in=created).values_list("status", flat=True)) == {"delivered"}


def test_drain__with_a_backlog_pauses_this_process_s_watch_of_its_kind(push_settings, fake, settings, monkeypatch):
    """A drain whose claims take whole batches says so (its `LingeringTask`'s `backlog()`): its own watcher then
    skips the aggregate over every pending row that found the kind overdue each round; with less than a batch it
    does not."""
    covers: list[tuple[str, float]] = []
    monkeypatch.setattr(wake, "pause_watch", lambda name, seconds: covers.append((name, seconds)))
    settings.WEAVE = {**settings.WEAVE, "PUSH_BATCH_SIZE": 5, "WAKE_LINGER": 0}
    monkeypatch.setattr(wake, "POLL_MAX", 0.7)
    NotificationFactory.create_batch(3)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())

    assert tasks.drain()["delivered"] == 3
    assert covers == []  # one claim, less than a batch: nothing more was due

    NotificationFactory.create_batch(17)
    Notification.objects.filter(status="pending").update(next_attempt_at=DatabaseClock().now())

    assert tasks.drain()["delivered"] == 17
    assert covers and {name for name, _ in covers} == {"notifications"} and {s for _, s in covers} == {0.7}
    assert len(covers) <= 3  # one per whole batch (17 rows: three of five, then two)

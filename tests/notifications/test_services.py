"""notification_create validation and enqueueing; retry/cancel guards; drain coalescing."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from django_q.models import OrmQ

from notifications.delivery.worker import DeliveryReport
from notifications.models import ContentLocked, Notification
from notifications.queue import drain_request_name, enqueue_drain
from notifications.services import (
    notification_cancel,
    notification_create,
    notification_edit,
    notification_retry_now,
)
from tests.factories import NotificationFactory
from weave import wake
from weave.models import WakeRequest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"device_token": "  "}, "device_token", "A device token is required."),
        # 2048: room for a Web Push subscription (endpoint URL and keys, as JSON).
        ({"device_token": "x" * 2049}, "device_token", "at most 2048 characters"),
        ({"title": ""}, "title", "A title is required."),
        ({"title": "x" * 201}, "title", "at most 200 characters"),
        ({"data": ["not", "a", "dict"]}, "data", "data must be a JSON object, not list."),
        ({"data": {"when": object()}}, "data", "not JSON-serialisable"),
    ],
)
def test_create__rejects_bad_input_with_a_clear_error(kwargs, field, message):
    values = {"device_token": "device-1", "title": "Hi", "body": "Hello", **kwargs}
    with pytest.raises(ValidationError) as caught:
        notification_create(**values)
    assert any(message in m for m in caught.value.message_dict[field])
    assert not Notification.objects.exists()


def test_create__rejects_an_oversized_payload(settings):
    settings.WEAVE = {"PUSH_MAX_PAYLOAD_BYTES": 256}
    with pytest.raises(ValidationError) as caught:
        notification_create(device_token="device-1", title="Hi", body="x" * 300)
    assert "the provider limit is 256 bytes" in caught.value.messages[0]
    assert not Notification.objects.exists()


def test_create__stores_a_due_row_and_enqueues_one_drain_after_commit(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        first = notification_create(device_token="device-1", title="Hi", body="Hello", data={"k": 1})
        notification_create(device_token="device-2", title="Hi", body="Hello")
    assert len(callbacks) == 1  # one transaction asks for one drain, however many it creates
    assert first.status == "pending" and first.next_attempt_at is not None and first.idempotency_key
    # Two creates, one queued drain: the second saw the first still waiting.
    assert [q.name() for q in OrmQ.objects.all()] == ["notifications.drain"]
    assert Notification.objects.claimable().count() == 2


def test_enqueue_drain__coalesces_on_weaves_own_row_until_the_drain_starts():
    assert enqueue_drain() is True
    assert enqueue_drain() is False
    assert OrmQ.objects.count() == 1
    (row,) = WakeRequest.objects.all()
    assert (row.name, row.requests) == (drain_request_name(), 1) and row.queued_until is not None
    assert row.name.startswith("notifications.drain@")
    wake.free_slot(drain_request_name())  # what the drain task does first
    assert enqueue_drain() is True
    assert OrmQ.objects.count() == 2
    assert WakeRequest.objects.get().requests == 2


def test_enqueue_drain__a_lost_task_holds_the_slot_only_until_its_time_passes(monkeypatch, settings):
    monkeypatch.setattr(wake, "REQUEST_LAPSE", 0.0)  # as if the queued drain had been lost long ago
    assert enqueue_drain() is True
    assert enqueue_drain() is True
    assert OrmQ.objects.count() == 2


def test_enqueue_drain__a_broker_that_refuses_is_logged_never_raised_and_the_slot_is_freed(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr("weave.wake.async_task", broken)
    assert enqueue_drain() is False  # the caller's row is stored: the watchers ask again, the caller never sees it
    assert "event=enqueue_failed" in caplog.text
    assert WakeRequest.objects.get().queued_until is None
    monkeypatch.undo()
    assert enqueue_drain() is True


def row(notification) -> dict:
    """Every column of the notification's row, as the database holds it now."""
    return Notification.objects.values().get(pk=notification.pk)


def test_retry_and_cancel__never_touch_a_row_under_a_live_lease(clock):
    held = NotificationFactory(next_attempt_at=clock.current)
    lease = Notification.objects.claim(held.pk, owner="worker-x", ttl=30, clock=clock)
    before = row(held)
    cancelled = notification_cancel(notification_ids=[held.pk], clock=clock)
    retried = notification_retry_now(notification_ids=[held.pk], clock=clock)
    assert (cancelled.busy, cancelled.changed, retried.busy, retried.changed) == ([held.pk], [], [held.pk], [])
    # The whole refusal: no column changed; the holder's owner, fence and expiry are intact.
    assert row(held) == before
    assert (before["status"], before["owner"], before["fence"]) == ("pending", "worker-x", lease.fence)
    assert before["lease_expires_at"] == lease.expires_at
    clock.advance(31)  # the lease expired: the row is free to cancel; the stale worker's guard will refuse it
    assert notification_cancel(notification_ids=[held.pk], clock=clock).changed == [held.pk]
    assert Notification.objects.get(pk=held.pk).status == "cancelled"


@pytest.mark.parametrize(("due", "more"), [(150, 1), (100, 0)])
def test_drain_task__asks_for_one_more_drain_when_more_than_a_batch_is_due(monkeypatch, due, more):
    # PUSH_BATCH_SIZE is 100: with more due than one batch, the starting drain asks for a second, which
    # (when it starts) does the same; so a backlog reaches every worker with one drain waiting at a time.
    from notifications import tasks

    NotificationFactory.create_batch(due, next_attempt_at=timezone.now())

    def delivered_all(**options):  # as if this drain delivered everything: nothing is left at its end
        Notification.objects.all().delete()
        return DeliveryReport(owner="test")

    monkeypatch.setattr(tasks, "run_drain", delivered_all)
    tasks.drain()
    assert OrmQ.objects.count() == more


# --- notification_edit: content changes only before the first claim ----------------------------------


def test_edit__an_unclaimed_notification_takes_the_new_content():
    notification = NotificationFactory()
    notification_edit(notification_id=notification.pk, title="New title", body="New body", data={"k": "v"})
    after = row(notification)
    assert (after["title"], after["body"], after["data"]) == ("New title", "New body", {"k": "v"})
    assert (after["fence"], after["owner"], after["status"]) == (0, None, "pending")


def _refused_edit(notification) -> dict:
    before = row(notification)
    with pytest.raises(ContentLocked, match="already claimed"):
        notification_edit(notification_id=notification.pk, title="Rewritten", body="after the fact", data={"x": 1})
    after = row(notification)
    assert after == before  # 0 rows changed: not the content, not the lease fields
    assert "Rewritten" not in (after["title"], after["body"]) and after["data"] != {"x": 1}
    return after


def test_edit__refused_while_a_worker_holds_the_lease(clock):
    notification = NotificationFactory(next_attempt_at=clock.current)
    lease = Notification.objects.claim(notification.pk, owner="worker-x", ttl=30, clock=clock)
    after = _refused_edit(notification)
    assert (after["status"], after["owner"], after["fence"]) == ("pending", "worker-x", lease.fence)
    assert after["lease_expires_at"] == lease.expires_at


def test_edit__refused_after_a_worker_claimed_and_released_it(clock):
    # Back to pending with no owner (a retry is due later), but it was claimed, so something may have been sent.
    notification = NotificationFactory(next_attempt_at=clock.current)
    lease = Notification.objects.claim(notification.pk, owner="worker-x", ttl=30, clock=clock)
    Notification.objects.release(lease, clock=clock)
    after = _refused_edit(notification)
    assert (after["status"], after["owner"], after["fence"], after["lease_expires_at"]) == (
        "pending",
        None,
        lease.fence,
        None,
    )


def test_edit__refused_when_a_lapsed_lease_still_names_its_worker(clock):
    notification = NotificationFactory(next_attempt_at=clock.current)
    lease = Notification.objects.claim(notification.pk, owner="worker-x", ttl=30, clock=clock)
    clock.advance(60)  # the worker stalled: its lease lapsed, but the row still names it
    after = _refused_edit(notification)
    assert (after["owner"], after["fence"]) == ("worker-x", lease.fence)

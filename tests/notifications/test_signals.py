"""Signals: sent after the finish commits, once per row, never for a refused finish; a raising receiver is harmless."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from notifications import signals
from notifications.delivery import Hooks, deliver_batch
from notifications.models import Notification
from notifications.services import device_deactivate, device_register
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db
TTL = 30


@pytest.fixture
def heard():
    """Connect a receiver to every signal; return what each heard as (signal name, id, status, reason)."""
    log = []

    def make(name):
        def receiver(sender, reason, **kwargs):
            obj = kwargs.get("notification") or kwargs.get("device")
            log.append((name, obj.pk, getattr(obj, "status", None) or ("inactive" if not obj.active else "?"), reason))

        return receiver

    receivers = {name: make(name) for name in ("delivered", "failed", "expired", "device")}
    pairs = [
        (signals.notification_delivered, receivers["delivered"]),
        (signals.notification_failed, receivers["failed"]),
        (signals.notification_expired, receivers["expired"]),
        (signals.device_deactivated, receivers["device"]),
    ]
    for signal, receiver in pairs:
        signal.connect(receiver)
    yield log
    for signal, receiver in pairs:
        signal.disconnect(receiver)


def due(clock, **fields):
    return NotificationFactory(next_attempt_at=clock.current, **fields)


def test_delivered_failed_and_expired__each_row_is_announced_once_after_commit(
    push_settings, fake, clock, heard, django_capture_on_commit_callbacks
):
    ok = due(clock, device_token="tok-ok")
    expired = due(clock, device_token="tok-late", expires_at=clock.current - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        deliver_batch(clock=clock, owner="worker-a", ttl=TTL)
    fake.configure(force_status=400)
    bad = due(clock, device_token="tok-bad")
    with django_capture_on_commit_callbacks(execute=True):
        deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    by_id = {pk: (name, status, reason) for name, pk, status, reason in heard}
    assert len(heard) == 3
    assert by_id[ok.pk][:2] == ("delivered", "delivered")
    assert by_id[expired.pk][:2] == ("expired", "expired") and by_id[expired.pk][2]
    assert by_id[bad.pk][:2] == ("failed", "failed") and "400" in by_id[bad.pk][2]


def test_nothing_is_announced_before_commit(push_settings, fake, clock, heard, django_capture_on_commit_callbacks):
    due(clock, device_token="tok-ok")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    assert heard == [] and callbacks  # queued for the commit, not sent inside the finish


def test_a_stale_workers_refused_finish_announces_nothing(
    push_settings, fake, clock, heard, django_capture_on_commit_callbacks
):
    row = due(clock, device_token="tok-1")
    fake.configure(latency_ms=20)
    taken = {}

    def takeover(_pks):
        if not taken:
            clock.advance(TTL + 1)
            fake.configure(force_status=400)  # B's answer differs from A's
            taken["b"] = deliver_batch(clock=clock, owner="worker-b", ttl=TTL)

    with django_capture_on_commit_callbacks(execute=True):
        deliver_batch(clock=clock, owner="worker-a", ttl=TTL, hooks=Hooks(before_finish=takeover))

    row.refresh_from_db()
    assert row.status == Notification.Status.FAILED  # B's finish
    assert [(name, pk) for name, pk, _, _ in heard] == [("failed", row.pk)]  # A's delivered was never announced


def test_a_raising_receiver_never_affects_delivery(push_settings, fake, clock, django_capture_on_commit_callbacks):
    def broken(sender, **kwargs):
        raise RuntimeError("the site's receiver is broken")

    signals.notification_delivered.connect(broken)
    try:
        row = due(clock, device_token="tok-1")
        with django_capture_on_commit_callbacks(execute=True):
            report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)
    finally:
        signals.notification_delivered.disconnect(broken)

    row.refresh_from_db()
    assert report.delivered == 1 and row.status == Notification.Status.DELIVERED


def test_device_deactivated__announced_with_the_reason_and_its_queued_rows_failed(
    push_settings, clock, heard, django_capture_on_commit_callbacks
):
    user = get_user_model().objects.create_user("alice")
    device = device_register(user=user, backend="default", token="phone-1")
    queued = NotificationFactory(device=device, device_token=device.token, next_attempt_at=clock.current)

    with django_capture_on_commit_callbacks(execute=True):
        device_deactivate(device=device, reason="lost the phone", clock=clock)
        device_deactivate(device=device, reason="again", clock=clock)  # already inactive: not announced again

    assert ("device", device.pk, "inactive", "lost the phone") in heard
    assert [name for name, pk, _, _ in heard if pk == queued.pk and name == "failed"] == ["failed"]
    assert len(heard) == 2

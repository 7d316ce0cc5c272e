"""A device's deactivation fails its free pending rows, including one whose holder's lease expired (a killed
worker): that row ends failed with no owner and no lease left, and the old holder cannot write it."""

import pytest
from django.contrib.auth import get_user_model

from notifications.devices import deactivate_device, fail_queued_for_device
from notifications.models import Notification
from notifications.services import device_register
from tests.factories import NotificationFactory
from weave.leases import LeaseLost

pytestmark = pytest.mark.django_db


def test_deactivation__a_row_under_an_expired_lease_ends_failed_without_an_owner(clock):
    user = get_user_model().objects.create_user("bob")
    device = device_register(user=user, backend="default", token="phone-9")
    row = NotificationFactory(device=device, device_token=device.token, next_attempt_at=clock.current)
    live = NotificationFactory(device=device, device_token=device.token, next_attempt_at=clock.current)
    lease = Notification.objects.claim(row.pk, owner="killed-worker", ttl=4, clock=clock)
    clock.advance(10)  # the holder was killed: its lease ran out
    Notification.objects.claim(live.pk, owner="live-worker", ttl=60, clock=clock)

    deactivate_device(device_id=device.pk, reason="gone", clock=clock)
    failed = fail_queued_for_device(device_id=device.pk, clock=clock)

    assert failed == [row.pk]
    row.refresh_from_db()
    assert (row.status, row.owner, row.lease_expires_at, row.fence) == ("failed", None, None, lease.fence)
    assert row.last_error.startswith("Not sent: the device was deactivated")
    # The killed holder's late write matches nothing: the row stays as the deactivation left it.
    with pytest.raises(LeaseLost):
        Notification.objects.guarded_update(lease, clock=clock, status="delivered")
    row.refresh_from_db()
    assert row.status == "failed"
    # A row under a live lease is left to its holder, which refuses to send to an inactive device.
    live.refresh_from_db()
    assert (live.status, live.owner) == ("pending", "live-worker")

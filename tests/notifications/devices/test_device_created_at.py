"""A device's `created_at` is the database's clock, as its `last_used_at` is.

The device cap keeps each user's most recent devices, ranked by `last_used_at` or, for a device never
used, `created_at`. With the two from different clocks, a host clock 5 minutes behind ranked a device
registered just now below one used two minutes ago, and the new install was the one left out.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from notifications.models import Device
from notifications.services import device_register, notification_send_to_user
from weave.leases import DbNow
from weave.leases.clock import read_database_now

pytestmark = pytest.mark.django_db
SKEW = timedelta(minutes=5)
APNS = ["ab" * 32, "cd" * 32, "ef" * 32]


@pytest.fixture(params=[-SKEW, SKEW], ids=["host-behind", "host-ahead"])
def host_clock_off(request, monkeypatch):
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + request.param)


def test_a_registered_device_is_dated_by_the_database_clock(backends, host_clock_off, django_user_model):
    user = django_user_model.objects.create_user("dana")
    before = read_database_now(connection)
    device = device_register(user=user, backend="apns", token=APNS[0])
    after = read_database_now(connection)

    assert before <= device.created_at <= after  # returned by the INSERT, not the host's clock
    assert Device.objects.get(pk=device.pk).created_at == device.created_at


def test_the_cap_keeps_the_device_registered_last_whatever_the_host_clock(
    backends, settings, host_clock_off, django_user_model
):
    user = django_user_model.objects.create_user("erin")
    used = [device_register(user=user, backend="apns", token=token) for token in APNS[:2]]
    for device, minutes in zip(used, (3, 2), strict=True):  # used 3 and 2 minutes ago, by the database clock
        Device.objects.filter(pk=device.pk).update(last_used_at=DbNow(timedelta(minutes=-minutes)))
    newest = device_register(user=user, backend="apns", token=APNS[2])  # never used yet
    settings.WEAVE = {**settings.WEAVE, "PUSH_MAX_DEVICES_PER_USER": 2}  # lowered after they registered

    rows = notification_send_to_user(user=user, title="Hi", body="")

    assert sorted(r.device_id for r in rows) == sorted([used[1].pk, newest.pk])
    assert [s.device_id for s in rows.skipped] == [used[0].pk]

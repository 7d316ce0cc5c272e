"""A notification's `created_at` is the database's clock, as every time of its story, not the host's.

The host's clock is set 5 minutes ahead in this process (`django.utils.timezone.now`, which
`auto_now_add` read): a notification must still be created before the database's "now".
"""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from notifications.models import Notification
from notifications.services import device_register, notification_create, notification_send_to_user
from weave.leases.clock import read_database_now

pytestmark = pytest.mark.django_db
SKEW = timedelta(minutes=5)


@pytest.fixture(autouse=True)
def host_clock_ahead(monkeypatch, settings):
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": {"fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}}},
    }
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + SKEW)


def db_now():
    return read_database_now(connection)


def test_create__created_at_is_database_time_and_known_after_the_insert():
    before = db_now()
    notification = notification_create(device_token="fcm-token-1-xxxxxxxxxxxxxxxx", backend="fcm", title="Hi", body="x")
    after = db_now()
    assert before <= notification.created_at <= after  # returned by the INSERT, not the host's clock
    assert Notification.objects.get(pk=notification.pk).created_at == notification.created_at


def test_send_to_user__each_rows_created_at_is_database_time():
    user = get_user_model().objects.create_user("alice")
    for n in (1, 2):
        device_register(user=user, backend="fcm", token=f"fcm-token-{n}-xxxxxxxxxxxxxxxx")
    before = db_now()
    rows = notification_send_to_user(user=user, title="Hi", body="x")
    after = db_now()
    assert len(rows) == 2
    for row in rows:
        assert before <= row.created_at <= after
        assert Notification.objects.get(pk=row.pk).created_at == row.created_at

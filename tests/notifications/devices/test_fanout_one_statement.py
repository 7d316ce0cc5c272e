"""One user's send inside the caller's transaction on PostgreSQL: one statement reads, locks and inserts.

`notification_send_to_user` builds the message for every configured backend first, so every refusal of
the content is known before the statement; the statement stores nothing when one of the user's devices
is on a backend that refuses it. The rows take each device's token as stored; when today's checks skip a
device or change its token, or a device is beyond the cap, the statement's rows go again and the planned
rows are inserted by the two-statement path, still inside the caller's transaction. What the caller
gets back is what is stored.
"""

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from notifications.models import Device, Notification
from notifications.services import device_register, notification_send_to_user

from .conftest import BACKENDS

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement send is PostgreSQL's"),
]
APNS = "ab" * 32
FCM = "fcm-token-1-xxxxxxxxxxxxxxxx"


@pytest.fixture
def capped(settings):
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": BACKENDS,
        "PUSH_MAX_DEVICES_PER_USER": 2,
    }


def kinds(queries):
    return [q["sql"].split(None, 1)[0].upper() for q in queries.captured_queries]


def stored(rows):
    """What the caller got, as (key, device, token, idempotency key, due, expiry, created) per row."""
    return sorted(
        (r.pk, r.device_id, r.device_token, r.idempotency_key, r.next_attempt_at, r.expires_at, r.created_at)
        for r in rows
    )


def test_the_rows_returned_are_the_rows_stored(capped, user):
    devices = [
        device_register(user=user, backend="apns", token=APNS),
        device_register(user=user, backend="fcm", token=FCM),
    ]

    with CaptureQueriesContext(connection) as queries:
        rows = notification_send_to_user(user=user, title="Hi", body="", ttl=60, data={"n": "1"})

    assert kinds(queries) == ["WITH"]
    assert sorted(r.device_id for r in rows) == sorted(d.pk for d in devices) and rows.skipped == []
    assert stored(rows) == stored(Notification.objects.all())
    assert len({r.idempotency_key for r in rows}) == 2 and all(r.expires_at and r.created_at for r in rows)
    assert all(not r._state.adding for r in rows)


def test_a_stored_token_todays_checks_refuse_leaves_no_row_and_the_others_get_theirs(capped, user):
    good = device_register(user=user, backend="apns", token=APNS)
    legacy = Device.objects.create(user=user, backend="default", token="two\nlines")  # before today's checks

    with CaptureQueriesContext(connection) as queries:
        rows = notification_send_to_user(user=user, title="Hi", body="")

    # The statement's rows go, and the planned one goes in as the two-statement path inserts it: a
    # constant number of statements still.
    assert kinds(queries)[:2] == ["WITH", "DELETE"] and len(queries) <= 4, kinds(queries)
    assert [r.device_id for r in rows] == [good.pk]
    assert [s.device_id for s in rows.skipped] == [legacy.pk] and "visible ASCII" in rows.skipped[0].reason
    assert stored(rows) == stored(Notification.objects.all())


def test_a_stored_token_todays_checks_change_is_sent_in_its_new_form(capped, user):
    device = Device.objects.create(user=user, backend="apns", token=f"  {APNS.upper()}  ")

    (row,) = notification_send_to_user(user=user, title="Hi", body="")

    assert (row.device_id, row.device_token) == (device.pk, APNS)
    assert list(Notification.objects.values_list("device_token", flat=True)) == [APNS]


def test_refused_content_stores_nothing_and_leaves_the_callers_transaction_usable(capped, user):
    device_register(user=user, backend="apns", token=APNS)
    device_register(user=user, backend="fcm", token=FCM)

    with CaptureQueriesContext(connection) as queries, pytest.raises(ValidationError) as caught:
        notification_send_to_user(user=user, title="Hi", body="", data={"items": [1, 2]})  # FCM: strings only

    assert "FCM data values must be strings" in caught.value.message_dict["data"][0]
    # The statement itself stored nothing (the APNs device's row neither): there was nothing to undo.
    assert kinds(queries) == ["WITH"] and Notification.objects.count() == 0
    rows = notification_send_to_user(user=user, title="Hi", body="")
    assert sorted(r.pk for r in rows) == sorted(Notification.objects.values_list("pk", flat=True))


def test_content_only_a_backend_with_no_device_of_the_user_refuses_is_sent(capped, user):
    device = device_register(user=user, backend="apns", token=APNS)  # FCM is configured, but alice has none

    (row,) = notification_send_to_user(user=user, title="Hi", body="", data={"items": [1, 2]})

    assert row.device_id == device.pk and Notification.objects.get().data == {"items": [1, 2]}


def test_a_device_beyond_the_cap_is_skipped_even_on_a_backend_that_refuses_the_content(capped, settings, user):
    settings.WEAVE = {**settings.WEAVE, "PUSH_MAX_DEVICES_PER_USER": 5}
    old = device_register(user=user, backend="fcm", token=FCM)
    Device.objects.filter(pk=old.pk).update(created_at=old.created_at.replace(year=2020))  # the least recent
    recent = [
        device_register(user=user, backend="apns", token=APNS),
        device_register(user=user, backend="apns", token="cd" * 32),
    ]
    settings.WEAVE = {**settings.WEAVE, "PUSH_MAX_DEVICES_PER_USER": 2}  # lowered after they registered

    rows = notification_send_to_user(user=user, title="Hi", body="", data={"items": [1, 2]})

    # The FCM device is beyond the cap: skipped, so its backend's refusal of the data does not matter.
    assert sorted(r.device_id for r in rows) == sorted(d.pk for d in recent)
    assert [s.device_id for s in rows.skipped] == [old.pk] and "PUSH_MAX_DEVICES_PER_USER (2)" in rows.skipped[0].reason
    assert stored(rows) == stored(Notification.objects.all())


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_send_keeps_its_read_before_the_statement(capped, user):
    device_register(user=user, backend="apns", token=APNS)

    with CaptureQueriesContext(connection) as queries:
        (row,) = notification_send_to_user(user=user, title="Hi", body="")

    # The statement would commit by itself before today's token checks could run on what it read.
    assert kinds(queries)[:2] == ["SELECT", "WITH"], kinds(queries)
    with transaction.atomic():
        assert Notification.objects.get().pk == row.pk


def test_a_backend_taken_out_of_the_settings_between_two_sends_is_seen_by_the_second(capped, settings, user):
    # The configured backends are found once per configuration: a change of WEAVE must drop them.
    device = device_register(user=user, backend="apns", token=APNS)
    assert [r.device_id for r in notification_send_to_user(user=user, title="Hi", body="")] == [device.pk]
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {k: v for k, v in BACKENDS.items() if k != "apns"}}

    rows = notification_send_to_user(user=user, title="Hi again", body="")

    assert list(rows) == [] and [s.device_id for s in rows.skipped] == [device.pk]
    assert "No push backend 'apns'" in rows.skipped[0].reason
    assert Notification.objects.filter(title="Hi again").count() == 0

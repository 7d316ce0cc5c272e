"""Device registry services: registration, deactivation, fan-out to a user's devices, validation per backend."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from notifications.models import Device, Notification
from notifications.services import (
    device_deactivate,
    device_register,
    notification_create,
    notification_send_to_user,
)
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db
APNS_TOKEN = "ab" * 32


@pytest.fixture
def backends(settings):
    # Services only need the backend classes (validation); no request is made here.
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": {
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}},
            "apns": {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": {}},
            "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend", "OPTIONS": {}},
        },
    }


@pytest.fixture
def user():
    return get_user_model().objects.create_user("alice")


def fields_of(caught):
    return set(caught.value.message_dict)


def test_register__is_idempotent_and_reactivates_a_known_token(backends, user):
    first = device_register(user=user, backend="apns", token=APNS_TOKEN, platform="ios")
    device_deactivate(device=first, reason="uninstalled")

    again = device_register(user=user, backend="apns", token=APNS_TOKEN)

    assert again.pk == first.pk and Device.objects.count() == 1
    assert (again.active, again.deactivated_at, again.deactivation_reason, again.platform) == (True, None, "", "ios")


def test_register__the_same_token_moves_to_the_user_who_registers_it_last(backends, user):
    bob = get_user_model().objects.create_user("bob")
    device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")

    device = device_register(user=bob, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")

    assert device.user == bob and Device.objects.count() == 1


def test_register__the_same_token_on_two_backends_is_two_devices(backends, user):
    device_register(user=user, backend="fcm", token="shared-token-xxxxxxxxxxxxxxxx")
    device_register(user=user, backend="default", token="shared-token-xxxxxxxxxxxxxxxx")

    assert Device.objects.count() == 2


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"backend": "nope"}, "backend", "No push backend 'nope'"),
        ({"token": "  "}, "token", "required"),
        ({"token": "not-hex"}, "token", "hexadecimal"),
        ({"backend": "webpush", "token": '{"endpoint": 1}'}, "token", "subscription JSON"),
        ({"platform": "toaster"}, "platform", "platform must be one of"),
        ({"token": "a" * 2050}, "token", "at most 2048"),
        ({"token": "g" * 64}, "token", "hexadecimal"),
    ],
)
def test_register__refuses_bad_input_naming_the_field_and_stores_nothing(backends, user, kwargs, field, text):
    values = {"user": user, "backend": "apns", "token": APNS_TOKEN, **kwargs}
    with pytest.raises(ValidationError) as caught:
        device_register(**values)
    assert fields_of(caught) == {field}
    assert text in " ".join(caught.value.message_dict[field])
    assert Device.objects.count() == 0


def test_send_to_user__one_row_per_active_device_with_expiry_priority_and_collapse(backends, user):
    phone = device_register(user=user, backend="apns", token=APNS_TOKEN, platform="ios")
    browser = device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx", platform="android")
    gone = device_register(user=user, backend="fcm", token="fcm-token-2-xxxxxxxxxxxxxxxx")
    device_deactivate(device=gone, reason="unregistered")
    device_register(user=get_user_model().objects.create_user("bob"), backend="fcm", token="fcm-bob-xxxxxxxxxxxxxxxx")

    rows = notification_send_to_user(
        user=user, title="Hi", body="There", data={"n": 1}, collapse_key="score", ttl=600, priority="high"
    )

    assert [(r.device_id, r.backend, r.device_token) for r in rows] == [
        (phone.pk, "apns", APNS_TOKEN),
        (browser.pk, "fcm", "fcm-token-1-xxxxxxxxxxxxxxxx"),
    ]
    for row in rows:
        assert (row.priority, row.collapse_key, row.status) == ("high", "score", "pending")
        # Both from the database clock in one INSERT (PostgreSQL's clock_timestamp() may move a microsecond).
        assert abs(row.expires_at - row.next_attempt_at - timedelta(seconds=600)) < timedelta(milliseconds=10)
    assert rows[0].data == {"n": 1}  # APNs takes JSON values
    assert rows[1].data == {"n": "1"}  # FCM takes strings: converted at creation, not at send time


def test_send_to_user__one_refused_device_stores_nothing_for_any(backends, user):
    device_register(user=user, backend="apns", token=APNS_TOKEN)
    device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")

    with pytest.raises(ValidationError) as caught:
        notification_send_to_user(user=user, title="Hi", body="", data={"items": [1, 2]})

    assert fields_of(caught) == {"data"}
    assert "FCM data values must be strings" in caught.value.message_dict["data"][0]
    assert Notification.objects.count() == 0


def test_send_to_user__a_user_without_devices_gets_no_rows(backends, user):
    assert notification_send_to_user(user=user, title="Hi", body="") == []


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"n": 1, "ok": True, "f": 1.5, "s": "x"}, {"n": "1", "ok": "true", "f": "1.5", "s": "x"}),
    ],
)
def test_create__fcm_data_scalars_become_strings(backends, data, expected):
    row = notification_create(backend="fcm", device_token="fcm-token-xxxxxxxxxxxxxxxx", title="Hi", body="", data=data)
    assert row.data == expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"backend": "fcm", "data": {"from": "x"}}, "data"),
        ({"backend": "fcm", "data": {"gcm.x": "x"}}, "data"),
        ({"backend": "fcm", "data": {"n": None}}, "data"),
        ({"backend": "fcm", "data": {"n": {"deep": 1}}}, "data"),
        ({"ttl": 0}, "ttl"),
        ({"ttl": -5}, "ttl"),
        ({"ttl": "60"}, "ttl"),
        ({"ttl": True}, "ttl"),
        ({"ttl": 29 * 24 * 3600}, "ttl"),
        ({"priority": "urgent"}, "priority"),
        ({"collapse_key": "x" * 65}, "collapse_key"),
        ({"collapse_key": "a\nb"}, "collapse_key"),
        ({"backend": "missing"}, "backend"),
    ],
)
def test_create__refuses_bad_input_naming_the_field(backends, kwargs, field):
    values = {"device_token": "token-1-xxxxxxxxxxxxxxxx", "title": "Hi", "body": "", **kwargs}
    with pytest.raises(ValidationError) as caught:
        notification_create(**values)
    assert fields_of(caught) == {field}
    assert Notification.objects.count() == 0


def test_create__for_an_inactive_device_is_refused(backends, user):
    device = device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")
    device_deactivate(device=device, reason="uninstalled")

    with pytest.raises(ValidationError) as caught:
        notification_create(device=device, title="Hi", body="")

    assert fields_of(caught) == {"device"} and "uninstalled" in caught.value.message_dict["device"][0]


def test_create__device_and_device_token_together_are_refused(backends, user):
    device = device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")
    with pytest.raises(ValidationError) as caught:
        notification_create(device=device, device_token="other", title="Hi", body="")
    assert fields_of(caught) == {"device"}


def test_deactivate__fails_queued_rows_with_the_reason_but_leaves_held_and_finished_ones(backends, user, clock):
    device = device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")
    queued = NotificationFactory(device=device, device_token=device.token, backend="fcm")
    held = NotificationFactory(device=device, device_token=device.token, backend="fcm", next_attempt_at=clock.current)
    Notification.objects.filter(pk=held.pk).claim_batch(owner="worker-a", ttl=30, limit=1, clock=clock)
    done = NotificationFactory(device=device, device_token=device.token, backend="fcm", status="delivered")

    device = device_deactivate(device=device, reason="user signed out", clock=clock)

    assert (device.active, device.deactivation_reason) == (False, "user signed out")
    assert device.deactivated_at is not None
    states = dict(Notification.objects.values_list("pk", "status"))
    assert states == {queued.pk: "failed", held.pk: "pending", done.pk: "delivered"}
    assert Notification.objects.get(pk=queued.pk).last_error == (
        "Not sent: the device was deactivated (user signed out)."
    )


def test_deactivate__twice_keeps_the_first_reason(backends, user):
    device = device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")
    device_deactivate(device=device, reason="first")
    device = device_deactivate(device=device, reason="second")
    assert device.deactivation_reason == "first"


def test_deactivate__needs_a_reason(backends, user):
    device = device_register(user=user, backend="fcm", token="fcm-token-1-xxxxxxxxxxxxxxxx")
    with pytest.raises(ValidationError) as caught:
        device_deactivate(device=device, reason=" ")
    assert fields_of(caught) == {"reason"}
    device.refresh_from_db()
    assert device.active


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_register__concurrent_first_registrations_of_one_token_make_one_device(backends):
    from tests.threads import run_threads

    users = {name: get_user_model().objects.create_user(name) for name in ("u1", "u2", "u3", "u4")}
    got: dict[str, int] = {}

    def register(name: str) -> None:
        got[name] = device_register(user=users[name], backend="fcm", token="one-install-xxxxxxxxxxxxxxxx").pk

    run_threads(register, users)

    assert len(set(got.values())) == 1
    assert Device.objects.filter(backend="fcm", token="one-install-xxxxxxxxxxxxxxxx").count() == 1

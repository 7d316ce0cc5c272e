"""The device registration endpoints (notifications.urls): who may call them, what they store, and what they refuse."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from notifications.models import Device, Notification
from notifications.services import notification_create
from notifications.views import REFRESHED, UNREGISTERED

pytestmark = pytest.mark.django_db
FCM_A = "eX" + "a1B2c3D4_-" * 15
FCM_B = "fQ" + "Z9y8X7w6:-" * 15
APNS = "ab" * 32
URL = "/push/devices/"


@pytest.fixture(autouse=True)
def backends(settings):
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": {
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}},
            "apns": {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": {}},
        },
    }
    cache.clear()


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password="pw")


@pytest.fixture
def client(alice):
    client = Client()
    client.force_login(alice)
    return client


def post(client, url, body, **extra):
    return client.post(url, data=json.dumps(body), content_type="application/json", **extra)


def test_register__creates_a_device_for_the_session_user_and_again_changes_nothing(client, alice):
    first = post(client, URL, {"backend": "fcm", "token": FCM_A, "platform": "android"})
    again = post(client, URL, {"backend": "fcm", "token": FCM_A, "platform": "android"})

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    device = Device.objects.get()
    assert (device.user, device.token, device.platform, device.active) == (alice, FCM_A, "android", True)
    assert FCM_A not in first.content.decode()  # the answer never echoes the whole token


def test_list__shows_only_the_callers_active_devices(client, alice):
    bob = get_user_model().objects.create_user("bob")
    post(client, URL, {"backend": "fcm", "token": FCM_A})
    Device.objects.create(user=bob, backend="fcm", token=FCM_B)

    listed = client.get(URL).json()["devices"]

    assert [d["backend"] for d in listed] == ["fcm"] and len(listed) == 1
    assert listed[0]["id"] == Device.objects.get(user=alice).pk


def test_anonymous__is_refused_and_nothing_is_stored():
    response = post(Client(), URL, {"backend": "fcm", "token": FCM_A})

    assert response.status_code == 401 and "Log in" in response.json()["errors"]["request"][0]
    assert not Device.objects.exists()


def test_session_write_without_csrf_token__is_refused(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    refused = post(client, URL, {"backend": "fcm", "token": FCM_A})
    client.get(URL)  # sets the csrftoken cookie
    allowed = post(client, URL, {"backend": "fcm", "token": FCM_A}, HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value)

    assert refused.status_code == 403 and "CSRF" in refused.json()["errors"]["request"][0]
    assert allowed.status_code == 201 and Device.objects.count() == 1


def bearer_user(request):
    """A site's token authentication: `Authorization: Bearer <username>` (a test stand-in for a real token)."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    return get_user_model().objects.filter(username=header.removeprefix("Bearer ")).first()


def only_alice(request, user):
    return user.username == "alice"


def test_token_auth__needs_no_csrf_and_the_permission_hook_can_refuse(settings, alice):
    get_user_model().objects.create_user("mallory")
    settings.WEAVE = {
        **settings.WEAVE,
        "PUSH_API_AUTHENTICATE": f"{__name__}.bearer_user",
        "PUSH_API_PERMISSION": f"{__name__}.only_alice",
    }
    client = Client(enforce_csrf_checks=True)

    ok = post(client, URL, {"backend": "fcm", "token": FCM_A}, HTTP_AUTHORIZATION="Bearer alice")
    refused = post(client, URL, {"backend": "fcm", "token": FCM_B}, HTTP_AUTHORIZATION="Bearer mallory")

    assert (ok.status_code, refused.status_code) == (201, 403)
    assert list(Device.objects.values_list("token", flat=True)) == [FCM_A]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"backend": "fcm"}, "token"),
        ({"backend": "fcm", "token": 12345}, "token"),
        ({"backend": "nope", "token": FCM_A}, "backend"),
        ({"backend": "apns", "token": "zz" * 32}, "token"),
        ({"backend": "fcm", "token": FCM_A, "platform": "toaster"}, "platform"),
    ],
)
def test_bad_registration__is_a_400_naming_the_field_and_stores_nothing(client, body, field):
    response = post(client, URL, body)

    assert response.status_code == 400 and field in response.json()["errors"]
    assert not Device.objects.exists()


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b"\xff\xfe", b'"a string"'])
def test_malformed_body__is_a_400(client, raw):
    response = client.post(URL, data=raw, content_type="application/json")

    assert response.status_code == 400 and not Device.objects.exists()


def test_oversized_body__is_refused_unread(client):
    response = post(client, URL, {"backend": "fcm", "token": "x" * 20_000})

    assert response.status_code == 413 and not Device.objects.exists()


def test_wrong_method__is_a_405_with_allow(client):
    response = client.get("/push/devices/unregister/")

    assert response.status_code == 405 and response["Allow"] == "POST"


def test_rate_limit__past_the_limit_is_a_429_with_retry_after(settings, client):
    settings.WEAVE = {**settings.WEAVE, "PUSH_API_RATE": 3}

    codes = [client.get(URL).status_code for _ in range(4)]

    assert codes[:3] == [200, 200, 200] and codes[3] == 429
    assert 0 < int(client.get(URL)["Retry-After"]) <= 60


def test_unregister__deactivates_the_device_and_its_queued_rows_are_not_sent(client, alice):
    device = Device.objects.get(pk=post(client, URL, {"backend": "fcm", "token": FCM_A}).json()["id"])
    queued = notification_create(title="hi", body="", device=device)

    response = post(client, "/push/devices/unregister/", {"backend": "fcm", "token": FCM_A})

    assert response.status_code == 200 and response.json()["active"] is False
    device.refresh_from_db()
    queued.refresh_from_db()
    assert (device.active, device.deactivation_reason) == (False, UNREGISTERED)
    assert queued.status == Notification.Status.FAILED and UNREGISTERED in queued.last_error


def test_unregister__someone_elses_token_is_a_404_and_changes_nothing(client):
    bob = get_user_model().objects.create_user("bob")
    theirs = Device.objects.create(user=bob, backend="fcm", token=FCM_B)

    response = post(client, "/push/devices/unregister/", {"backend": "fcm", "token": FCM_B})

    theirs.refresh_from_db()
    assert response.status_code == 404 and theirs.active


def test_refresh__moves_to_the_new_token_and_retires_the_old(client, alice):
    post(client, URL, {"backend": "fcm", "token": FCM_A, "platform": "android"})

    response = post(client, "/push/devices/refresh/", {"backend": "fcm", "old_token": FCM_A, "token": FCM_B})

    assert response.status_code == 200
    new, old = Device.objects.get(token=FCM_B), Device.objects.get(token=FCM_A)
    assert (new.user, new.active, new.platform) == (alice, True, "android")
    assert (old.active, old.deactivation_reason) == (False, REFRESHED)

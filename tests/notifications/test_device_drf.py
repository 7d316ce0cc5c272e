"""The optional DRF viewset: the same services and refusals as the plain endpoints, under DRF's own auth."""

import pytest
from django.contrib.auth import get_user_model

from notifications.models import Device, Notification
from notifications.services import notification_create

pytest.importorskip("rest_framework")
from rest_framework.test import APIClient  # noqa: E402

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.notifications.drf_urls")]
FCM_A = "eX" + "a1B2c3D4_-" * 15
FCM_B = "fQ" + "Z9y8X7w6:-" * 15


@pytest.fixture(autouse=True)
def backends(settings):
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": {"fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}}},
    }


@pytest.fixture
def client():
    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("alice"))
    return client


def test_register_list_refresh_unregister(client):
    first = client.post("/devices/", {"backend": "fcm", "token": FCM_A, "platform": "android"}, format="json")
    again = client.post("/devices/", {"backend": "fcm", "token": FCM_A}, format="json")
    listed = client.get("/devices/").json()["devices"]
    moved = client.post("/devices/refresh/", {"backend": "fcm", "old_token": FCM_A, "token": FCM_B}, format="json")
    queued = notification_create(title="t", body="", device=Device.objects.get(token=FCM_B))
    gone = client.post("/devices/unregister/", {"backend": "fcm", "token": FCM_B}, format="json")

    assert (first.status_code, again.status_code, moved.status_code, gone.status_code) == (201, 200, 200, 200)
    assert [d["id"] for d in listed] == [first.json()["id"]]
    assert not Device.objects.filter(active=True).exists()
    queued.refresh_from_db()
    assert queued.status == Notification.Status.FAILED


@pytest.mark.parametrize(
    ("body", "field"),
    [({"backend": "fcm", "token": 5}, "token"), ({"backend": "nope", "token": FCM_A}, "backend"), ({}, "backend")],
)
def test_bad_input__is_a_400_naming_the_field(client, body, field):
    response = client.post("/devices/", body, format="json")

    assert response.status_code == 400 and field in response.json()
    assert not Device.objects.exists()


def test_anonymous__is_refused():
    response = APIClient().post("/devices/", {"backend": "fcm", "token": FCM_A}, format="json")

    assert response.status_code in (401, 403) and not Device.objects.exists()


def test_someone_elses_token__is_a_404(client):
    bob = get_user_model().objects.create_user("bob")
    Device.objects.create(user=bob, backend="fcm", token=FCM_B)

    response = client.post("/devices/unregister/", {"backend": "fcm", "token": FCM_B}, format="json")

    assert response.status_code == 404 and Device.objects.get(token=FCM_B).active

"""The Device admin: filters, and a permission-gated "Send test notification" that goes through the service."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from notifications.models import Device, Notification
from notifications.services import device_deactivate, device_register

pytestmark = pytest.mark.django_db
CHANGELIST = reverse("admin:weave_notifications_device_changelist")


@pytest.fixture
def devices(settings):
    settings.WEAVE = {"PUSH_URL": "https://push.example/send"}
    alice = User.objects.create_user("alice")
    live = device_register(user=alice, backend="default", token="phone-live", platform="android")
    dead = device_register(user=alice, backend="default", token="phone-dead", platform="ios")
    device_deactivate(device=dead, reason="Unregistered")
    return live, dead


def staff(client, *codenames):
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="weave_notifications", codename__in=codenames)
    )
    client.force_login(user)
    return user


def act(client, action, rows):
    data = {"action": action, "_selected_action": [r.pk for r in rows], "index": 0}
    return client.post(CHANGELIST, data, follow=True)


def test_changelist__filters_active_and_inactive(client, devices):
    live, dead = devices
    staff(client, "view_device")

    active = client.get(CHANGELIST, {"active__exact": "1"})
    inactive = client.get(CHANGELIST, {"active__exact": "0"})

    assert [d.pk for d in active.context["cl"].result_list] == [live.pk]
    assert [d.pk for d in inactive.context["cl"].result_list] == [dead.pk]


def test_send_test__needs_its_permission(client, devices):
    live, _ = devices
    staff(client, "view_device", "change_device")

    response = act(client, "send_test_notification", [live])

    assert Notification.objects.count() == 0
    assert "send_test_notification" not in response.content.decode().split('name="action"')[-1].split("</select>")[0]


def test_send_test__queues_one_notification_per_active_device_and_logs_it(
    client, devices, django_capture_on_commit_callbacks
):
    live, dead = devices
    staff(client, "view_device", "send_test_notification")

    with django_capture_on_commit_callbacks():
        response = act(client, "send_test_notification", [live, dead])

    (row,) = Notification.objects.all()
    assert (row.device_id, row.device_token, row.title, row.status) == (
        live.pk,
        "phone-live",
        "Test notification",
        "pending",
    )
    assert row.expires_at is not None
    text = response.content.decode()
    assert "1 test notification queued" in text
    # One clause per device, its id a link, no brackets nested in brackets.
    assert f'Not sent to 1 device. device <a href="/admin/weave_notifications/device/{dead.pk}/change/">' in text
    assert "Unregistered" in text and ".)." not in text
    assert LogEntry.objects.filter(object_id=str(live.pk), change_message__contains="test notification").exists()


def test_deactivate_action__goes_through_the_service(client, devices):
    live, _ = devices
    staff(client, "view_device", "change_device")

    act(client, "deactivate", [live])

    live.refresh_from_db()
    assert live.active is False and live.deactivation_reason == "Deactivated in the admin by staff."
    assert Device.objects.filter(active=True).count() == 0

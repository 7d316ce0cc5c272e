"""A site registers a user's devices on FCM, APNs, Web Push and the webhook, and sends to all of them.

The worker runs with every backend configured in WEAVE["PUSH_BACKENDS"], against the four local fakes.
"""

import pytest
from django.contrib.auth import get_user_model

from notifications.delivery import deliver_batch
from notifications.models import Device, Notification
from notifications.services import device_register, notification_send_to_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def all_backends(settings, fake, fcm_options, apns_options, webpush_options):
    settings.WEAVE = {
        "PUSH_TIMEOUT": 5.0,
        "PUSH_LEASE_TTL": 30.0,
        "PUSH_CONCURRENCY": 8,
        "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True,  # the Web Push fake listens on 127.0.0.1
        "PUSH_BACKENDS": {
            "default": {
                "BACKEND": "notifications.backends.webhook.WebhookBackend",
                "OPTIONS": {"url": fake.push_url, "token": "test-token"},
            },
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options},
            "apns": {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": apns_options},
            "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend", "OPTIONS": webpush_options},
        },
    }


def test_send_to_user__reaches_every_backend_and_prunes_the_dead_devices(all_backends, fake, fcm, apns, webpush):
    user = get_user_model().objects.create_user("alice")
    live = [
        device_register(user=user, backend="default", token="gateway-phone", platform="other"),
        device_register(user=user, backend="fcm", token="fcm-token-" + "a" * 40, platform="android"),
        device_register(user=user, backend="apns", token="ab" * 32, platform="ios"),
        device_register(user=user, backend="webpush", token=webpush.subscription("alice").as_token(), platform="web"),
    ]
    dead = [
        device_register(user=user, backend="fcm", token="dead-" + "b" * 40, platform="android"),
        device_register(user=user, backend="apns", token="dead" + "0" * 60, platform="ios"),
        device_register(user=user, backend="webpush", token=webpush.subscription("gone-1").as_token(), platform="web"),
    ]

    rows = notification_send_to_user(
        user=user, title="Your order", body="has shipped", data={"order": "42"}, ttl=3600, priority="high"
    )
    report = deliver_batch(owner="worker-a")

    assert len(rows) == 7
    assert (report.delivered, report.failed, report.pruned, report.lease_lost) == (4, 3, 3, 0)
    statuses = dict(Notification.objects.values_list("device_id", "status"))
    assert {statuses[d.pk] for d in live} == {"delivered"}
    assert {statuses[d.pk] for d in dead} == {"failed"}
    assert set(Device.objects.filter(active=False).values_list("pk", flat=True)) == {d.pk for d in dead}
    assert set(Device.objects.filter(last_used_at__isnull=False).values_list("pk", flat=True)) == {d.pk for d in live}
    # Each provider got exactly its own messages, and each decrypted / verified its way.
    assert fake.stats()["unique_deliveries"] == 1
    assert fcm.stats()["delivered"] == 1 and fcm.stats()["by_reason"] == {"UNREGISTERED": 1}
    assert apns.stats()["delivered"] == 1 and apns.stats()["by_reason"] == {"Unregistered": 1}
    assert webpush.plaintexts()[0]["data"] == {"order": "42"}

    # The next send reaches only the live devices.
    again = notification_send_to_user(user=user, title="Delivered", body="")
    assert sorted(r.device_id for r in again) == sorted(d.pk for d in live)

"""Every fault at once, through the worker: four backends, each provider misbehaving its own way.

The webhook repeats every answer, FCM's token endpoint answers HTML, APNs refuses every stream, and
the Web Push service is unavailable with an HTTP-date Retry-After. No row is finished with another
row's answer, and no attempt is `unknown`: in none of these faults can anything have been delivered
without an answer.
"""

import uuid

import pytest

from notifications.delivery import deliver_batch
from notifications.models import DeliveryAttempt, Notification
from notifications.testing.fake_apns import live_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def everything_failing(settings, fake, fcm, apns, webpush, fcm_options, apns_options, webpush_options):
    settings.WEAVE = {
        "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True,  # the Web Push services here are local fakes
        "PUSH_TIMEOUT": 3.0,
        "PUSH_LEASE_TTL": 30.0,
        "PUSH_CONCURRENCY": 8,
        "PUSH_BATCH_SIZE": 100,
        "PUSH_BACKENDS": {
            "default": {"BACKEND": "notifications.backends.webhook.WebhookBackend", "OPTIONS": {"url": fake.push_url}},
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options},
            "apns": {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": apns_options},
            "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend", "OPTIONS": webpush_options},
        },
    }
    fake.configure(extra_answers=1)
    fcm.configure(token_fault="html")
    apns.configure(wire="refuse_streams")
    webpush.configure(error="ServiceUnavailable", rate=1.0, retry_after="date:600")


def test_mixed_faults__every_row_tells_its_own_truth(everything_failing, clock, fake, fcm, apns, webpush):
    tokens = {
        "default": [f"gateway-{i}" for i in range(10)],
        "fcm": [f"fcm-{uuid.uuid4().hex}" for _ in range(10)],
        "apns": [live_token() for _ in range(10)],
        "webpush": [webpush.subscription(f"user-{i}").as_token() for i in range(10)],
    }
    rows = {
        alias: [
            Notification.objects.create(backend=alias, device_token=t, title="t", next_attempt_at=clock.current)
            for t in made
        ]
        for alias, made in tokens.items()
    }

    deliver_batch(clock=clock)

    ids = fake.stats()["delivered_ids"]
    for row in rows["default"]:
        row.refresh_from_db()
        assert row.status == Notification.Status.DELIVERED
        assert row.provider_message_id == ids[str(row.idempotency_key)]
    assert not DeliveryAttempt.objects.filter(outcome="unknown").exists()
    for alias, said in (("fcm", "not a token"), ("apns", "REFUSED_STREAM"), ("webpush", "HTTP 503")):
        attempts = DeliveryAttempt.objects.filter(notification__in=rows[alias])
        assert set(attempts.values_list("outcome", flat=True)) <= {"temporary"}
        assert all(said in reason for reason in attempts.values_list("reason", flat=True)), alias
    assert fcm.stats()["requests"] == 0 and apns.deliveries() == [] and webpush.deliveries() == []

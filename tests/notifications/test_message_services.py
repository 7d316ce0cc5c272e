"""Services for rich, silent, topic and scheduled notifications: what is stored, what is refused, when a row is due."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from notifications.delivery import deliver_batch
from notifications.models import Notification
from notifications.services import (
    device_register,
    notification_create,
    notification_send_to_topic,
)

pytestmark = pytest.mark.django_db
FCM_TOKEN = "fcm-token-" + "c" * 40


@pytest.fixture
def backends(settings):
    settings.WEAVE = {
        **(settings.WEAVE or {}),
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": {
            "default": {"BACKEND": "notifications.backends.webhook.WebhookBackend", "OPTIONS": {}},
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}},
        },
    }


def test_silent__data_without_title_or_body_is_stored_as_a_background_push(backends):
    row = notification_create(title="", body="", data={"sync": "inbox"}, device_token=FCM_TOKEN, backend="fcm")

    assert (row.title, row.body, row.data) == ("", "", {"sync": "inbox"})


@pytest.mark.parametrize(("title", "body", "data"), [("", "", {}), ("", "a body", {"x": "1"}), ("", "a body", {})])
def test_silent__an_alert_still_needs_a_title(backends, title, body, data):
    with pytest.raises(ValidationError) as caught:
        notification_create(title=title, body=body, data=data, device_token=FCM_TOKEN, backend="fcm")

    assert "A title is required" in caught.value.message_dict["title"][0]
    assert not Notification.objects.exists()


def test_options__are_stored_checked_and_count_toward_the_payload_limit(backends, settings):
    row = notification_create(title="t", body="b", device_token=FCM_TOKEN, backend="fcm", options={"badge": 2})
    assert row.options == {"badge": 2}

    settings.WEAVE = {**settings.WEAVE, "PUSH_MAX_PAYLOAD_BYTES": 200}
    with pytest.raises(ValidationError) as caught:
        notification_create(title="t", body="b", device_token=FCM_TOKEN, backend="fcm", options={"subtitle": "s" * 250})
    assert "options" in caught.value.message_dict
    assert Notification.objects.count() == 1


def test_topic__one_row_to_the_topic_and_bad_names_are_refused(backends):
    row = notification_send_to_topic(backend="fcm", topic="news", title="Breaking", body="…")
    cond = notification_send_to_topic(backend="fcm", condition="'a' in topics && ('b' in topics || 'c' in topics)",
                                      title="t", body="b")  # fmt: skip

    assert (row.device_token, row.device_id) == ("topic:news", None)
    assert cond.device_token.startswith("condition:'a' in topics")
    for bad in ({"topic": "no spaces"}, {"topic": ""}, {"condition": "drop table"}, {"topic": "a", "condition": "b"}):
        with pytest.raises(ValidationError):
            notification_send_to_topic(backend="fcm", title="t", body="b", **bad)
    with pytest.raises(ValidationError):  # a raw token naming a malformed topic is checked the same way
        notification_create(device_token="topic:no spaces", backend="fcm", title="t", body="b")
    with pytest.raises(ValidationError) as caught:
        notification_send_to_topic(backend="default", topic="news", title="t", body="b")
    assert "cannot send to topics" in caught.value.message_dict["backend"][0]
    assert Notification.objects.count() == 2


def test_topic__a_device_cannot_register_a_topic_as_its_token(backends, django_user_model):
    user = django_user_model.objects.create_user("eve")

    with pytest.raises(ValidationError) as caught:
        device_register(user=user, backend="fcm", token="topic:everyone", platform="android")

    assert "topic" in caught.value.message_dict["token"][0]


def test_send_at__the_row_is_due_then_and_its_ttl_counts_from_then(push_settings, fake, clock):
    at = clock.current + timedelta(minutes=10)

    row = notification_create(title="later", body="", device_token="tok-1", send_at=at, ttl=60, clock=clock)

    assert (row.next_attempt_at, row.expires_at) == (at, at + timedelta(seconds=60))
    early = deliver_batch(clock=clock, owner="worker-a", ttl=30)
    clock.advance(600)
    on_time = deliver_batch(clock=clock, owner="worker-b", ttl=30)
    row.refresh_from_db()
    assert (early.claimed, on_time.delivered) == (0, 1)
    assert row.status == Notification.Status.DELIVERED and fake.stats()["requests"] == 1


@pytest.mark.parametrize("bad", ["tomorrow", 12345])
def test_send_at__must_be_an_aware_datetime(push_settings, clock, bad):
    with pytest.raises(ValidationError) as caught:
        notification_create(title="t", body="", device_token="tok-1", send_at=bad, clock=clock)

    assert "send_at" in caught.value.message_dict


def test_send_at__a_naive_datetime_is_refused(push_settings, clock):
    naive = clock.current.replace(tzinfo=None)

    with pytest.raises(ValidationError):
        notification_create(title="t", body="", device_token="tok-1", send_at=naive, clock=clock)
    assert not Notification.objects.exists()


def night_is_quiet(user, at, priority):
    """A site's quiet-hours policy: nothing but high priority between 22:00 and 07:00 UTC."""
    if priority == "high" or 7 <= at.hour < 22:
        return None
    morning = at.replace(hour=7, minute=0, second=0, microsecond=0)
    return morning if at.hour < 7 else morning + timedelta(days=1)


@pytest.fixture
def quiet(push_settings, settings, django_user_model):
    settings.WEAVE = {**settings.WEAVE, "PUSH_QUIET_HOURS": f"{__name__}.night_is_quiet"}
    user = django_user_model.objects.create_user("sleeper")
    return device_register(user=user, backend="default", token="phone-quiet")


def test_quiet_hours__defer_without_an_attempt_and_the_story_says_why(quiet, clock):
    from notifications.explain import explain_notification

    late = clock.current.replace(hour=23)
    row = notification_create(title="night", body="", device=quiet, send_at=late, clock=clock)
    urgent = notification_create(title="2fa", body="", device=quiet, send_at=late, priority="high", clock=clock)

    morning = (late + timedelta(days=1)).replace(hour=7)
    assert (row.next_attempt_at, row.attempts) == (morning, 0)
    assert row.last_error.startswith("Deferred by the quiet-hours policy from")
    assert (urgent.next_attempt_at, urgent.last_error) == (late, "")
    assert "Deferred by the quiet-hours policy" in explain_notification(row.pk, clock=clock).as_text()


def test_quiet_hours__a_daytime_push_is_due_at_once(quiet, clock):
    row = notification_create(title="day", body="", device=quiet, clock=clock)

    assert row.next_attempt_at == clock.current and row.last_error == ""

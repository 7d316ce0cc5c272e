"""Rich, silent and topic messages as each provider's fake receives them (and refuses what the real service refuses)."""

import pytest
from django.core.exceptions import ValidationError

from notifications.backends.base import Outcome
from notifications.content import check_options

from .conftest import message, run, send_all

FCM_TOKEN = "fcm-token-" + "b" * 40
APNS_TOKEN = "ab" * 32
RICH = check_options(
    {
        "subtitle": "Order 1234",
        "badge": 3,
        "sound": "default",
        "image": "https://cdn.example/parcel.png",
        "category": "ORDER",
        "thread_id": "orders",
        "body_loc_key": "ORDER_SHIPPED",
        "body_loc_args": ["1234"],
        "apns": {"interruption_level": "time-sensitive", "relevance_score": 0.5},
        "android": {"channel_id": "orders", "color": "#3366ff", "visibility": "PRIVATE"},
        "webpush": {"icon": "https://cdn.example/i.png", "require_interaction": True, "dir": "ltr"},
    }
)


def test_apns__a_rich_alert_carries_every_option_in_aps(apns, apns_backend):
    (result,) = run(send_all(apns_backend, [message(APNS_TOKEN, options=RICH)]))

    assert result.outcome == Outcome.DELIVERED
    (delivery,) = apns.deliveries()
    aps = delivery.message["aps"]
    assert aps["alert"] == {
        "title": "Hello",
        "body": "World",
        "subtitle": "Order 1234",
        "loc-key": "ORDER_SHIPPED",
        "loc-args": ["1234"],
    }
    assert (aps["badge"], aps["sound"], aps["category"], aps["thread-id"]) == (3, "default", "ORDER", "orders")
    assert aps["mutable-content"] == 1  # the image needs the app's service extension
    assert (aps["interruption-level"], aps["relevance-score"]) == ("time-sensitive", 0.5)
    assert delivery.message["image"] == "https://cdn.example/parcel.png"
    assert delivery.headers["apns-push-type"] == "alert"


def test_apns__a_silent_push_is_background_at_priority_5(apns, apns_backend):
    silent = message(APNS_TOKEN, title="", body="", data={"sync": "inbox"}, priority="high")

    (result,) = run(send_all(apns_backend, [silent]))

    assert result.outcome == Outcome.DELIVERED
    (delivery,) = apns.deliveries()
    assert delivery.message == {"sync": "inbox", "aps": {"content-available": 1}}
    assert (delivery.headers["apns-push-type"], delivery.headers["apns-priority"]) == ("background", "5")


def test_apns_fake__refuses_unknown_aps_keys_like_apple(apns, apns_backend):
    # check_options refuses them; a backend bypassing it must still meet the fake's refusal.
    raw = {"apns": {"aps": {"badge": 1}}}
    sneaky = dict(check_options(raw))
    sneaky["apns"] = {"aps": {"badgee": 1}}

    (result,) = run(send_all(apns_backend, [message(APNS_TOKEN, options=sneaky)]))

    assert result.outcome == Outcome.PERMANENT and apns.deliveries() == []


def test_fcm__a_rich_alert_maps_to_notification_android_apns_and_webpush(fcm, fcm_backend):
    (result,) = run(send_all(fcm_backend, [message(FCM_TOKEN, options=RICH)]))

    assert result.outcome == Outcome.DELIVERED
    (delivery,) = fcm.deliveries()
    body = delivery.message
    assert body["notification"] == {"title": "Hello", "body": "World", "image": "https://cdn.example/parcel.png"}
    android = body["android"]["notification"]
    assert (android["channel_id"], android["color"], android["visibility"]) == ("orders", "#3366ff", "PRIVATE")
    assert (android["notification_count"], android["click_action"], android["body_loc_key"]) == (
        3,
        "ORDER",
        "ORDER_SHIPPED",
    )
    assert body["apns"]["payload"]["aps"]["badge"] == 3
    assert body["webpush"]["notification"]["requireInteraction"] is True


def test_fcm__a_silent_push_is_data_only(fcm, fcm_backend):
    (result,) = run(send_all(fcm_backend, [message(FCM_TOKEN, title="", body="", data={"sync": "1"})]))

    assert result.outcome == Outcome.DELIVERED
    body = fcm.deliveries()[0].message
    assert "notification" not in body and "notification" not in body["android"]
    assert "notification" not in body["webpush"]
    assert body["apns"]["headers"]["apns-push-type"] == "background"
    assert body["apns"]["headers"]["apns-priority"] == "5"
    assert body["apns"]["payload"]["aps"] == {"content-available": 1}
    assert body["data"] == {"sync": "1"}


@pytest.mark.parametrize(
    ("token", "field", "value"),
    [("topic:news", "topic", "news"), ("condition:'a' in topics && 'b' in topics", "condition", None)],
)
def test_fcm__topic_and_condition_targets_replace_the_token(fcm, fcm_backend, token, field, value):
    (result,) = run(send_all(fcm_backend, [message(token)]))

    assert result.outcome == Outcome.DELIVERED
    body = fcm.deliveries()[0].message
    assert "token" not in body and body[field] == (value or token.removeprefix("condition:"))


def test_webpush__rich_options_reach_the_service_worker_and_silent_carries_only_data(webpush, webpush_backend):
    subscription = webpush.subscription("dana").as_token()
    rich = message(subscription, options=RICH)
    silent = message(subscription, title="", body="", data={"sync": 1})

    run(send_all(webpush_backend, [rich, silent]))

    shown, background = sorted(webpush.plaintexts(), key=lambda p: "title" in p, reverse=True)
    assert shown["icon"] == "https://cdn.example/i.png" and shown["requireInteraction"] is True
    assert shown["image"] == "https://cdn.example/parcel.png" and shown["dir"] == "ltr"
    assert background == {"data": {"sync": 1}}


@pytest.mark.parametrize(
    "options",
    [
        {"badge": -1},
        {"badge": True},
        {"image": "http://plain.example/x.png"},
        {"apns": {"aps": {"alrt": "typo"}}},
        {"apns": {"interruption_level": "loud"}},
        {"android": {"color": "blue"}},
        {"webpush": {"actions": [{"action": "a"}]}},
        {"nonsense": 1},
        {"android": "not an object"},
        "not a mapping",
    ],
)
def test_check_options__refuses_what_a_provider_would_refuse_naming_options(options):
    with pytest.raises(ValidationError) as caught:
        check_options(options)

    assert set(caught.value.message_dict) == {"options"}


def test_fcm_fake__refuses_a_message_over_4_kib_like_fcm(fcm, fcm_backend):
    (result,) = run(send_all(fcm_backend, [message(FCM_TOKEN, data={"blob": "x" * 5000})]))

    assert result.outcome == Outcome.PERMANENT and fcm.deliveries() == []

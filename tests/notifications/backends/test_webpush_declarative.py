"""Declarative Web Push: a message the browser shows itself, sent only to subscriptions registered as able to."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.test import Client

from notifications.backends.fcm import fcm_message
from notifications.backends.webpush import WebPushBackend
from notifications.content import check_options
from notifications.models import Device
from notifications.services import device_register
from notifications.testing.fake_webpush import declarative_problem

from .conftest import message, run, send_all

DECLARATIVE = {
    "image": "https://cdn.example/parcel.png",
    "webpush": {
        "declarative": True,
        "navigate": "https://shop.example/orders/1234",
        "app_badge": 3,
        "mutable": True,
        "lang": "en",
        "dir": "ltr",
        "require_interaction": True,
        "actions": [
            {"action": "track", "title": "Track", "navigate": "https://shop.example/track/1234"},
            {"action": "help", "title": "Help"},
        ],
    },
}


def token(subscription, *, declarative):
    info = json.loads(subscription.as_token())
    if declarative is not None:
        info["declarative"] = declarative
    return json.dumps(info)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"webpush": {"declarative": True}}, "needs webpush.navigate"),
        ({"webpush": {"declarative": True, "navigate": "http://shop.example/"}}, "navigate must be an https"),
        ({"webpush": {"declarative": "yes", "navigate": "https://a.example/"}}, "declarative must be true or false"),
        ({"webpush": {"app_badge": -1}}, "app_badge must be a whole number"),
        ({"webpush": {"mutable": 1}}, "mutable must be true or false"),
        ({"webpush": {"actions": [{"action": "a", "title": "A", "navigate": "javascript:x"}]}}, "actions"),
    ],
)
def test_options__declarative_ones_are_checked(options, words):
    with pytest.raises(ValidationError) as caught:
        check_options(options)
    assert words in caught.value.message_dict["options"][0]


def test_token__the_flag_is_kept_only_when_literally_true(webpush):
    sub = webpush.subscription("flag")

    assert json.loads(WebPushBackend.canonical_token(token(sub, declarative=True)))["declarative"] is True
    for other in (None, False, "true", 1, {"x": 1}):
        assert "declarative" not in WebPushBackend.canonical_token(token(sub, declarative=other))


def test_send__a_declarative_subscription_gets_the_declarative_message(webpush, webpush_backend):
    sub = webpush.subscription("safari")
    sent = message(token(sub, declarative=True), data={"order": "1234"}, options=DECLARATIVE)

    (result,) = run(send_all(webpush_backend, [sent]))

    assert result.outcome == "delivered"
    (shown,) = webpush.declarative()
    assert declarative_problem(shown) == ""
    assert shown == {
        "web_push": 8030,
        "notification": {
            "title": "Hello",
            "body": "World",
            "navigate": "https://shop.example/orders/1234",
            "tag": sent.idempotency_key,
            "image": "https://cdn.example/parcel.png",
            "lang": "en",
            "dir": "ltr",
            "require_interaction": True,
            "data": {"order": "1234"},
            "actions": [
                {"action": "track", "title": "Track", "navigate": "https://shop.example/track/1234"},
                {"action": "help", "title": "Help", "navigate": "https://shop.example/orders/1234"},
            ],
        },
        "app_badge": 3,
        "mutable": True,
    }


@pytest.mark.parametrize(
    ("flag", "options", "title"),
    [
        (None, DECLARATIVE, "Hello"),  # the browser never said it can: the service worker shows it
        (True, {}, "Hello"),  # the message did not ask for it
        (True, DECLARATIVE, ""),  # a silent push has nothing to show
    ],
)
def test_send__otherwise_the_classic_payload_goes(webpush, webpush_backend, flag, options, title):
    sub = webpush.subscription(f"classic-{flag}-{bool(options)}-{bool(title)}")
    sent = message(token(sub, declarative=flag), title=title, body="", data={"k": "v"}, options=options)

    (result,) = run(send_all(webpush_backend, [sent]))

    assert result.outcome == "delivered"
    (plain,) = webpush.plaintexts()
    assert "web_push" not in plain and webpush.declarative() == []
    assert not {"declarative", "app_badge", "mutable"} & set(plain)


def test_fcm__navigate_becomes_the_webpush_link():
    body = fcm_message(message("fcm-token-" + "a" * 40, options=DECLARATIVE), None)["message"]

    assert body["webpush"]["fcm_options"] == {"link": "https://shop.example/orders/1234"}
    assert not {"navigate", "declarative", "app_badge", "mutable"} & set(body["webpush"]["notification"])


@pytest.fixture
def site(settings, webpush_options):
    settings.WEAVE = {
        **settings.WEAVE,
        "PUSH_BACKENDS": {
            "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend", "OPTIONS": webpush_options}
        },
    }
    cache.clear()


@pytest.mark.django_db
def test_register__the_same_subscription_with_a_new_flag_is_the_same_device(site, webpush):
    user = get_user_model().objects.create_user("browser")
    sub = webpush.subscription("upgraded-safari")
    before = device_register(user=user, backend="webpush", token=token(sub, declarative=None), platform="web")

    after = device_register(user=user, backend="webpush", token=token(sub, declarative=True), platform="web")

    assert after.pk == before.pk and Device.objects.count() == 1
    assert json.loads(after.token)["declarative"] is True
    back = device_register(user=user, backend="webpush", token=token(sub, declarative=None), platform="web")
    assert back.pk == before.pk and "declarative" not in back.token


@pytest.mark.django_db
def test_endpoint__a_page_registers_its_flag_and_unregisters_with_either_spelling(site, webpush):
    user = get_user_model().objects.create_user("page", password="pw")
    client = Client()
    client.force_login(user)
    info = json.loads(token(webpush.subscription("page"), declarative=True))

    def post(url, body):
        return client.post(url, data=json.dumps(body), content_type="application/json")

    assert post("/push/devices/", {"backend": "webpush", "platform": "web", "token": info}).status_code == 201
    plain = {k: v for k, v in info.items() if k != "declarative"}
    gone = post("/push/devices/unregister/", {"backend": "webpush", "token": plain})
    assert gone.status_code == 200 and not Device.objects.get().active

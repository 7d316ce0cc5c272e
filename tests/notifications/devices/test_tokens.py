"""Device tokens are user input: each backend's canonical form, and device_register's refusals.

A refusal is a ValidationError naming the field, nothing is stored, and the caller's transaction stays
usable; what is stored can always be sent.
"""

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notifications.backends.apns import APNsBackend
from notifications.backends.base import TokenError
from notifications.backends.fcm import FCMBackend
from notifications.backends.webhook import WebhookBackend
from notifications.backends.webpush import WebPushBackend
from notifications.models import Device, Notification
from notifications.services import device_deactivate, device_register, notification_send_to_user

from .conftest import FCM_ENDPOINT, b64url, subscription

pytestmark = pytest.mark.django_db
APNS = "ab" * 32
FCM = "cXyZ1234:APA91bH-" + "k" * 40


def refused(**kwargs):
    before = Device.objects.count()
    with pytest.raises(ValidationError) as caught:
        device_register(**kwargs)
    assert Device.objects.count() == before, "a refused registration left a row behind"
    return set(caught.value.message_dict)


@pytest.mark.parametrize(
    ("backend", "token", "field"),
    [
        ("default", "dev\x00ice", "token"),  # PostgreSQL refuses NUL (DataError)
        ("default", "lone \ud800 surrogate", "token"),  # not encodable (UnicodeEncodeError)
        ("default", 12345, "token"),  # not text (AttributeError)
        ("default", b"bytes", "token"),
        ("default", "表" * 2048, "token"),  # too big for the unique index's row (OperationalError)
        ("default", "two\nlines", "token"),  # stored but never sendable
        ("default", "tab\there", "token"),
        ("default", "bell\x07", "token"),
        ("default", "not a token ☃", "token"),
        ("fcm", "not a token ☃", "token"),
        ("fcm", "short", "token"),
        ("fcm", "a" * 1025, "token"),
        ("fcm", "abc.def/ghi+" + "x" * 20, "token"),
        ("apns", "ab" * 32 + "a", "token"),  # odd number of hex digits
        ("webpush", subscription(keys={"p256dh": b64url(b"\x04" + b"\x01" * 64)}), "token"),  # not on the curve
    ],
)
def test_register__refuses_what_would_crash_the_database_or_never_be_sent(backends, user, backend, token, field):
    assert refused(user=user, backend=backend, token=token) == {field}


# Refused before as well; kept so the stricter checks never let them through.
@pytest.mark.parametrize(
    ("backend", "token", "field"),
    [
        ("default", None, "token"),
        ("apns", APNS + "\n" + "x", "token"),
        ("apns", "ab" * 31, "token"),  # 31 bytes
        ("apns", "ab" * 101, "token"),  # 101 bytes
        ("apns", "zz" * 32, "token"),
        ("apns", "<" + APNS + ">", "token"),
        ("webpush", "{}", "token"),
        ("webpush", "not json", "token"),
        ("webpush", "[1, 2]", "token"),
        ("webpush", json.dumps({"endpoint": FCM_ENDPOINT}), "token"),
        ("webpush", subscription(keys={"p256dh": b64url(b"\x02" + b"\x01" * 32)}), "token"),  # compressed
        ("webpush", subscription(keys={"auth": b64url(b"x" * 15)}), "token"),
        ("webpush", subscription(keys={"auth": "not base64!"}), "token"),
        ("webpush", subscription(keys={"auth": 16}), "token"),
        ("webpush", subscription(endpoint=7), "token"),
        ("webpush", "[" * 5000 + "]" * 5000, "token"),
        ("nope", APNS, "backend"),
        (7, APNS, "backend"),
        (None, APNS, "backend"),
    ],
)
def test_register__keeps_refusing_malformed_tokens_and_backends(backends, user, backend, token, field):
    assert refused(user=user, backend=backend, token=token) == {field}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"user": 7}, "user"),
        ({"user": "alice"}, "user"),
        ({"platform": 3}, "platform"),
        ({"platform": "toaster"}, "platform"),
        ({"platform": "ios\x00"}, "platform"),
        ({"user": object()}, "user"),
    ],
)
def test_register__keeps_refusing_a_wrong_user_or_platform(backends, user, kwargs, field):
    assert refused(**{"user": user, "backend": "apns", "token": APNS, **kwargs}) == {field}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"clock": "now"}, "clock"),
        ({"user": type("FakeUser", (), {"pk": 1})()}, "user"),  # anything with a pk used to pass
    ],
)
def test_register__every_argument_is_type_checked(backends, user, kwargs, field):
    assert refused(**{"user": user, "backend": "apns", "token": APNS, **kwargs}) == {field}


def test_register__keeps_refusing_an_unsaved_user(backends):
    from django.contrib.auth import get_user_model

    assert refused(user=get_user_model()(username="ghost"), backend="apns", token=APNS) == {"user"}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"device": 1}, "device"),
        ({"device": None}, "device"),
        ({"reason": 5}, "reason"),
        ({"reason": "a\x00b"}, "reason"),
        ({"reason": "two\nlines"}, "reason"),
        ({"reason": "x" * 501}, "reason"),
        ({"clock": object()}, "clock"),
    ],
)
def test_deactivate__every_argument_is_type_checked(backends, user, kwargs, field):
    device = device_register(user=user, backend="apns", token=APNS)
    with pytest.raises(ValidationError) as caught:
        device_deactivate(**{"device": device, "reason": "gone", **kwargs})
    assert set(caught.value.message_dict) == {field}
    device.refresh_from_db()
    assert device.active


def test_deactivate__a_deleted_device_is_refused_naming_it(backends, user):
    device = device_register(user=user, backend="apns", token=APNS)
    Device.objects.filter(pk=device.pk).delete()
    with pytest.raises(ValidationError) as caught:
        device_deactivate(device=device, reason="gone")
    assert set(caught.value.message_dict) == {"device"}


def test_register__a_refusal_leaves_the_callers_transaction_usable(backends, user):
    with transaction.atomic():
        for token in ("a\x00", "\ud800", 1, "表" * 2048):
            with pytest.raises(ValidationError):
                device_register(user=user, backend="default", token=token)
        device_register(user=user, backend="default", token="phone-1")
    assert Device.objects.count() == 1


def test_apns__tokens_are_stored_lower_case(backends, user):
    device = device_register(user=user, backend="apns", token=APNS.upper())
    assert device.token == APNS
    assert device_register(user=user, backend="apns", token=APNS).pk == device.pk  # one device, not two


def test_webpush__a_pretty_printed_subscription_is_stored_compact_and_can_be_sent(backends, user):
    pretty = subscription(indent=2)
    assert "\n" in pretty

    device = device_register(user=user, backend="webpush", token=pretty)

    info = json.loads(pretty)
    assert device.token == json.dumps(
        {"endpoint": info["endpoint"], "keys": {"p256dh": info["keys"]["p256dh"], "auth": info["keys"]["auth"]}},
        separators=(",", ":"),
    )
    # The same subscription, printed either way, is one device.
    assert device_register(user=user, backend="webpush", token=json.dumps(info)).pk == device.pk
    rows = notification_send_to_user(user=user, title="Hi", body="")
    assert [r.device_token for r in rows] == [device.token] and rows.skipped == []


@pytest.mark.parametrize(
    ("backend_cls", "token"),
    [
        (APNsBackend, APNS + "\n"),  # `$` matches before a trailing newline; fullmatch does not
        (APNsBackend, APNS[:-1]),
        (FCMBackend, "not a token ☃"),
        (FCMBackend, FCM + "\n"),
        (WebhookBackend, "not a token ☃"),
        (WebhookBackend, ""),
        (WebPushBackend, "null"),
    ],
)
def test_canonical_token__each_backend_refuses_what_it_cannot_send(backend_cls, token):
    with pytest.raises(TokenError):
        backend_cls.canonical_token(token)


def test_canonical_token__good_tokens_come_back_canonical():
    assert APNsBackend.canonical_token(APNS.upper()) == APNS
    assert FCMBackend.canonical_token(FCM) == FCM
    assert WebhookBackend.canonical_token("phone-1") == "phone-1"


# --- fuzzing -------------------------------------------------------------------------------------------

any_char = st.one_of(
    st.characters(min_codepoint=0), st.integers(0xD800, 0xDFFF).map(chr), st.sampled_from('\x00\n\r\t é表☃{}":')
)
any_text = st.lists(any_char, max_size=60).map("".join)
hexish = st.text(alphabet="0123456789abcdefABCDEF\n ", min_size=60, max_size=70)
json_sub = st.builds(
    lambda endpoint, p256dh, auth, indent: json.dumps(
        {"endpoint": endpoint, "keys": {"p256dh": p256dh, "auth": auth}}, indent=indent
    ),
    st.one_of(any_text, st.sampled_from([FCM_ENDPOINT, "http://127.0.0.1/x", "https://[::1]/"]), st.integers()),
    st.one_of(any_text, st.just(json.loads(subscription())["keys"]["p256dh"])),
    st.one_of(any_text, st.just(b64url(b"a" * 16))),
    st.sampled_from([None, 2]),
)
anything = st.one_of(any_text, hexish, json_sub, st.none(), st.integers(), st.binary(max_size=10), st.lists(any_text))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    backend=st.one_of(st.sampled_from(["default", "fcm", "apns", "webpush"]), anything),
    token=anything,
    platform=st.one_of(st.sampled_from(["", "ios", "web"]), anything),
    with_user=st.booleans(),
)
def test_register__fuzzed_arguments_register_or_are_refused_by_field_and_what_is_stored_can_be_sent(
    backends, user, backend, token, platform, with_user
):
    before = Device.objects.count()
    try:
        with transaction.atomic():
            device = device_register(user=user if with_user else None, backend=backend, token=token, platform=platform)
    except ValidationError as exc:
        assert set(exc.message_dict) <= {"backend", "token", "platform", "user"}
        assert Device.objects.count() == before
        return
    # Whatever was stored is canonical for its backend and sendable: one line, printable, bounded.
    from notifications.services import _backend_class

    cls = _backend_class(device.backend)
    assert cls.canonical_token(device.token) == device.token
    assert device.token.isprintable() and len(device.token.encode()) <= 2048
    if with_user:
        rows = notification_send_to_user(user=user, title="Hi", body="")
        assert device.pk in {r.device_id for r in rows}
        Notification.objects.all().delete()


def test_create__a_raw_token_is_held_to_the_same_format_and_stored_canonical(backends):
    from notifications.services import notification_create

    row = notification_create(backend="apns", device_token=APNS.upper(), title="Hi", body="")
    assert row.device_token == APNS
    pretty = subscription(indent=2)
    row = notification_create(backend="webpush", device_token=pretty, title="Hi", body="")
    assert "\n" not in row.device_token and json.loads(row.device_token)["keys"] == json.loads(pretty)["keys"]
    for backend, token in (("webpush", subscription("http://127.0.0.1:5432/reset")), ("fcm", "not a token ☃")):
        with pytest.raises(ValidationError) as caught:
            notification_create(backend=backend, device_token=token, title="Hi", body="")
        assert set(caught.value.message_dict) == {"device_token"}
    assert Notification.objects.count() == 2

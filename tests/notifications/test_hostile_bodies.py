"""Hostile request bodies at every device endpoint (plain and DRF): deep nesting, huge numbers, odd
encodings, duplicate keys, a top level that is not an object, random bytes. Always a 4xx JSON answer
that names the problem, never a 5xx, and nothing stored."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notifications.models import Device

pytestmark = pytest.mark.django_db
FCM = "eX" + "a1B2c3D4_-" * 15
PLAIN = ["/push/devices/", "/push/devices/refresh/", "/push/devices/unregister/"]
DRF = ["/api/devices/", "/api/devices/refresh/", "/api/devices/unregister/"]
GOOD = {"backend": "fcm", "token": FCM, "old_token": FCM}


def nested(depth: int) -> bytes:
    return ('{"backend": "fcm", "token": ' + "[" * depth + "]" * depth + "}").encode()


def dupes() -> bytes:
    return b'{"backend": "fcm", "token": "' + FCM.encode() + b'", "token": "' + FCM[::-1].encode() + b'"}'


NAMED = {
    "deep nesting (10 KB)": nested(5000),
    "deep object nesting": b'{"backend": "fcm", "token": ' + b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"}",
    "huge integer": b'{"backend": "fcm", "token": ' + b"9" * 5000 + b"}",
    "huge float": b'{"backend": "fcm", "token": 1e999999}',
    "NaN": b'{"backend": "fcm", "token": NaN}',
    "UTF-16": json.dumps(GOOD).encode("utf-16"),
    "UTF-8 with BOM": b"\xef\xbb\xbf" + json.dumps(GOOD).encode(),
    "invalid UTF-8": b'{"backend": "fcm", "token": "\xff\xfe"}',
    "lone surrogate escape": b'{"backend": "fcm", "token": "\\ud800"}',
    "NUL escape": b'{"backend": "fcm\\u0000", "token": "x"}',
    "duplicate keys": dupes(),
    "a list": json.dumps([GOOD]).encode(),
    "a string": b'"hello"',
    "a number": b"42",
    "null": b"null",
    "empty": b"",
    "truncated": b'{"backend": "fcm", "tok',
}


@pytest.fixture(autouse=True)
def backends(settings):
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": {"fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}}},
        "PUSH_API_RATE": 1_000_000,
    }
    settings.ROOT_URLCONF = "tests.notifications.hostile_urls"
    cache.clear()


@pytest.fixture
def client():
    user = get_user_model().objects.get_or_create(username="fuzz")[0]
    client = Client()
    client.force_login(user)
    return client


def answer_is_a_4xx_json(response) -> dict:
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert isinstance(body, dict) and body
    return body


@pytest.mark.parametrize("url", PLAIN + DRF)
@pytest.mark.parametrize("name", list(NAMED))
def test_a_hostile_body_is_a_4xx_json_answer_that_says_why(client, url, name):
    response = client.post(url, NAMED[name], content_type="application/json")

    body = answer_is_a_4xx_json(response)
    assert not Device.objects.exists()
    if url in PLAIN and name in ("deep nesting (10 KB)", "duplicate keys", "UTF-16", "huge float"):
        said = " ".join(body["errors"]["request"])
        assert any(word in said for word in ("nested", "twice", "UTF-8", "too large")), said


JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30)
)
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=10), inner, max_size=4), max_leaves=20)  # fmt: skip


def shaped(value) -> bytes:
    return json.dumps(value).encode()


BODIES = st.one_of(
    st.binary(max_size=300),
    JSON_VALUES.map(shaped),
    st.dictionaries(st.sampled_from(["backend", "token", "old_token", "platform"]), JSON_VALUES).map(shaped),
    st.integers(min_value=1, max_value=8000).map(nested),
    st.sampled_from(list(NAMED.values())),
    st.tuples(st.sampled_from(["utf-16", "utf-32", "latin-1", "utf-8-sig"]), JSON_VALUES).map(
        lambda pair: json.dumps({"backend": "fcm", "token": pair[1]}, ensure_ascii=False).encode(pair[0], "replace")
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(url=st.sampled_from(PLAIN + DRF), body=BODIES, content_type=st.sampled_from(
    ["application/json", "application/json; charset=utf-16", "text/plain"]))  # fmt: skip
def test_fuzz__no_body_ever_gets_a_5xx_or_an_answer_that_is_not_json(client, url, body, content_type):
    response = client.generic("POST", url, body, content_type=content_type)

    assert response.status_code < 500, (response.status_code, body[:200], response.content[:300])
    if response.status_code >= 400:
        answer_is_a_4xx_json(response)
    else:
        json.loads(response.content)

"""Whatever a site stores (any collapse key, title, data, TTL), each backend builds a request its provider accepts."""

import re
import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from notifications.backends.apns import apns_request
from notifications.backends.base import PushMessage
from notifications.backends.fcm import FCMBackend, fcm_message
from notifications.backends.options import DataError, web_push_topic
from notifications.testing.fake_fcm import validate_message

# What notification_create accepts: a collapse key of at most 64 printable characters.
collapse_keys = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=64)
data = st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda k: not k.startswith(("google", "gcm"))),
                       st.one_of(st.text(max_size=20), st.integers(), st.booleans()), max_size=4)  # fmt: skip


def message(collapse_key: str, title: str, body: str, ttl: int | None, high: bool, values: dict) -> PushMessage:
    return PushMessage(
        idempotency_key=str(uuid.uuid4()),
        token="fcm-token-" + "a" * 30,
        title=title,
        body=body,
        data=values,
        collapse_key=collapse_key,
        priority="high" if high else "normal",
        expires_at=None if ttl is None else datetime.now(UTC) + timedelta(seconds=ttl),
    )


@settings(max_examples=200, deadline=None)
@given(
    collapse_key=collapse_keys,
    title=st.text(max_size=50),
    body=st.text(max_size=50),
    ttl=st.one_of(st.none(), st.integers(min_value=1, max_value=28 * 24 * 3600)),
    high=st.booleans(),
    values=data,
)
def test_fcm__every_message_passes_the_v1_schema(collapse_key, title, body, ttl, high, values):
    try:
        prepared = FCMBackend.prepare_data(values)
    except DataError:
        return  # refused at notification_create: never sent
    body_json = fcm_message(message(collapse_key, title, body, ttl, high, prepared), ttl)

    validate_message(body_json)  # raises SchemaError on anything FCM would refuse

    apns_headers = body_json["message"]["apns"]["headers"]
    assert len(apns_headers["apns-collapse-id"].encode()) <= 64


@settings(max_examples=200, deadline=None)
@given(collapse_key=collapse_keys, ttl=st.one_of(st.none(), st.integers(min_value=1, max_value=10**6)))
def test_apns_and_webpush__collapse_ids_always_fit(collapse_key, ttl):
    sent = message(collapse_key, "t", "b", ttl, True, {})
    headers, _ = apns_request(sent, topic="com.example", push_type="alert", ttl=ttl)

    assert len(headers["apns-collapse-id"].encode()) <= 64
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", headers["apns-id"])
    topic = web_push_topic(collapse_key or sent.idempotency_key)
    assert re.fullmatch(r"[A-Za-z0-9_\-]{1,32}", topic)
    # The same key always maps to the same ids: a resend replaces, never stacks.
    assert (
        apns_request(sent, topic="com.example", push_type="alert", ttl=ttl)[0]["apns-collapse-id"]
        == (headers["apns-collapse-id"])
    )
    assert web_push_topic(collapse_key or sent.idempotency_key) == topic

"""notification_create refuses bad input of every kind with a ValidationError naming the field.

Nothing is stored, and the caller's transaction stays usable (no DataError/IntegrityError inside it).
"""

import math

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notifications.models import Notification
from notifications.services import notification_create
from weave.validation import json_bytes

pytestmark = pytest.mark.django_db

GOOD = {"device_token": "device-1", "title": "Hi", "body": "Hello", "data": {"k": 1}}


def refused(**changes):
    before = Notification.objects.count()
    with pytest.raises(ValidationError) as caught:
        notification_create(**{**GOOD, **changes})
    assert Notification.objects.count() == before, "a refused notification left a row behind"
    return caught.value.message_dict


def deep(levels):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"device_token": 12345}, "device_token"),
        ({"device_token": b"device-1"}, "device_token"),
        ({"device_token": None}, "device_token"),
        ({"device_token": "dev\x00ice"}, "device_token"),
        ({"device_token": "dev\nice"}, "device_token"),
        ({"device_token": "x" * 2049}, "device_token"),
        ({"title": None}, "title"),
        ({"title": 7}, "title"),
        ({"title": "Hi\x00"}, "title"),
        ({"title": "Hi \ud800"}, "title"),
        ({"body": None}, "body"),
        ({"body": b"bytes"}, "body"),
        ({"body": ["a"]}, "body"),
        ({"body": "a\x00b"}, "body"),
        ({"body": "lone \udfff surrogate"}, "body"),
        ({"body": "bell \x07"}, "body"),
        ({"data": {"x": float("nan")}}, "data"),
        ({"data": {"x": [1, float("inf")]}}, "data"),
        ({"data": {"x": -math.inf}}, "data"),
        ({"data": {"x": "a\x00"}}, "data"),
        ({"data": {"a\x00": 1}}, "data"),
        ({"data": {"x": "\ud83d"}}, "data"),
        ({"data": {1: "int key"}}, "data"),
        ({"data": {"x": (1, 2)}}, "data"),
        ({"data": {"x": {1, 2}}}, "data"),
        ({"data": {"x": b"raw"}}, "data"),
        ({"data": {"x": deep(5000)}}, "data"),
        ({"data": "not an object"}, "data"),
    ],
)
def test_create__refuses_bad_input_naming_the_field(changes, field):
    assert field in refused(**changes)


def test_create__a_refusal_leaves_the_callers_transaction_usable():
    with transaction.atomic():
        for bad in ({"title": "x\x00"}, {"data": {"x": float("nan")}}, {"data": deep(3000)}, {"body": "\ud800"}):
            with pytest.raises(ValidationError):
                notification_create(**{**GOOD, **bad})
        ok = notification_create(**GOOD)  # the same transaction still works
    assert Notification.objects.filter(pk=ok.pk).exists()


def test_create__size_is_counted_in_utf8_bytes_of_the_compact_json_sent(settings):
    settings.WEAVE = {"PUSH_MAX_PAYLOAD_BYTES": 4096}
    # 1,800 "é" are 3,600 UTF-8 bytes; ASCII-escaped (\u00e9) they would be 10,800 and wrongly refused.
    body = "é" * 1800
    created = notification_create(**{**GOOD, "body": body})
    assert created.body == body
    # And the limit holds on what is sent: 2,100 "é" are 4,200 bytes.
    assert "body" in refused(body="é" * 2100)


def test_create__the_size_limit_names_the_field_that_takes_the_room(settings):
    settings.WEAVE = {"PUSH_MAX_PAYLOAD_BYTES": 512}
    assert "data" in refused(data={"blob": "x" * 600})
    message = refused(body="y" * 600)["body"][0]
    assert "the provider limit is 512 bytes" in message


# --- fuzzing -------------------------------------------------------------------------------------------

# Every code point, lone surrogates included: hostile callers are not limited to valid Unicode.
any_char = st.one_of(st.characters(min_codepoint=0), st.integers(0xD800, 0xDFFF).map(chr), st.sampled_from("\x00\n é"))
any_text = st.lists(any_char, max_size=40).map("".join)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), any_text)
json_like = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(any_text, st.integers()), inner, max_size=4),
        st.tuples(inner),
    ),
    max_leaves=20,
)
anything = st.one_of(any_text, st.none(), st.integers(), st.binary(max_size=10), json_like)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    device_token=st.one_of(any_text, anything),
    title=st.one_of(any_text, anything),
    body=st.one_of(any_text, anything),
    data=st.one_of(st.dictionaries(any_text, json_like, max_size=5), anything),
)
def test_create__any_input_is_stored_whole_or_refused_naming_a_field(device_token, title, body, data):
    before = Notification.objects.count()
    try:
        with transaction.atomic():
            created = notification_create(device_token=device_token, title=title, body=body, data=data)
    except ValidationError as exc:
        assert set(exc.message_dict) <= {"device_token", "title", "body", "data"}, exc.message_dict
        assert Notification.objects.count() == before
        return
    stored = Notification.objects.get(pk=created.pk)
    assert (stored.device_token, stored.title, stored.body) == (device_token.strip(), title, body)
    assert stored.data == (data or {})
    wire = {"to": stored.device_token, "title": stored.title, "body": stored.body, "data": stored.data}
    assert len(json_bytes(wire)) <= 4096

"""The request's header lines come from small memos; each must give exactly what the code without it gave.

`http11.request_bytes` keeps the lines of header fields it already checked, and the lean path
(`http._wire_field`) keeps each header's encoded pair. The oracles below are the code as it was before
the memos (checked and encoded every time); every generated request goes through both, twice, so the
second pass is answered from the memo, and refusals must be the same refusals each time.
"""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifications.backends import http, http11
from notifications.backends.http11 import LocalProtocolError, request_bytes

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")
_VALUE = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*")


def old_request_bytes(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """`request_bytes` before the memo, verbatim."""
    if not _TOKEN.fullmatch(method):
        raise LocalProtocolError(f"invalid method {method[:20]!r}")
    if not _TARGET.fullmatch(target):
        raise LocalProtocolError("the request target has a space or a control character")
    lines = [b"%s %s HTTP/1.1" % (method, target)]
    for name, value in headers:
        value = value.strip(b" \t")
        if not _TOKEN.fullmatch(name):
            raise LocalProtocolError(f"invalid header name {name[:40]!r}")
        if not _VALUE.fullmatch(value):
            raise LocalProtocolError(f"header {name.decode('ascii')!r} holds a line break or a control character")
        lines.append(name + b": " + value)
    lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _outcome(make, *args):  # type: ignore[no-untyped-def]
    try:
        return "ok", make(*args)
    except Exception as exc:  # noqa: BLE001 - the exception is the outcome compared
        return type(exc), str(exc)


names = st.one_of(
    st.sampled_from([b"Host", b"Content-Type", b"Authorization", b"Idempotency-Key", b"X-Id"]),
    st.binary(max_size=8),
)
values = st.one_of(
    st.sampled_from([b"application/json", b"Bearer abc", b" padded\t", b"", b"a\r\nX-Smuggled: 1", b"nul\x00"]),
    st.binary(max_size=12),
)
fields = st.lists(st.tuples(names, values), max_size=6)


@settings(max_examples=400)
@given(fields, st.binary(max_size=10))
def test_request_bytes__the_same_bytes_or_the_same_refusal_as_without_the_memo(
    headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    expected = _outcome(old_request_bytes, b"POST", b"/push", headers, body)
    for _ in range(2):  # the second time, every field that passed comes from the memo
        assert _outcome(request_bytes, b"POST", b"/push", headers, body) == expected


def test_a_refused_field_is_refused_every_time_and_never_kept() -> None:
    smuggler = (b"X-Value", b"a\r\nX-Smuggled: 1")
    for _ in range(3):
        with pytest.raises(LocalProtocolError, match="line break"):
            request_bytes(b"POST", b"/push", [(b"Host", b"x"), smuggler], b"")
    assert smuggler not in http11._CHECKED


def test_the_memo_stays_bounded_under_one_new_value_per_request() -> None:
    for i in range(3 * http11._CHECKED_MAX):
        wire = request_bytes(b"POST", b"/p", [(b"Host", b"x"), (b"Idempotency-Key", b"key-%d" % i)], b"{}")
        assert b"\r\nIdempotency-Key: key-%d\r\n" % i in wire
        assert len(http11._CHECKED) <= http11._CHECKED_MAX


def _old_pair(name: str | bytes, value: str | bytes) -> tuple[bytes, bytes]:
    return http._encoded(name, "ascii"), http._encoded(value, "utf-8")


text_or_bytes = st.one_of(st.text(max_size=8), st.binary(max_size=8))


@settings(max_examples=300)
@given(st.lists(st.tuples(text_or_bytes, text_or_bytes), max_size=6))
def test_wire_field__the_same_pair_or_the_same_error_as_encoding_each_time(
    pairs: list[tuple[str | bytes, str | bytes]],
) -> None:
    for name, value in pairs:
        expected = _outcome(_old_pair, name, value)
        for _ in range(2):
            got = _outcome(http._wire_field, name, value)
            assert got == expected
            if got[0] == "ok":
                assert type(got[1][0]) is bytes and type(got[1][1]) is bytes


def test_wire_field__str_and_bytes_of_the_same_text_are_separate_entries() -> None:
    assert http._wire_field("X-A", "é") == (b"X-A", "é".encode())
    assert http._wire_field(b"X-A", "é".encode()) == (b"X-A", b"\xc3\xa9")
    with pytest.raises(UnicodeEncodeError):
        http._wire_field("X-é", "v")  # a name that is not ASCII is refused, every time
    with pytest.raises(UnicodeEncodeError):
        http._wire_field("X-é", "v")

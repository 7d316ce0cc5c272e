"""The lean transport's HTTP/1.1 framing, checked against h11 (the parser httpx uses) as an oracle.

Every generated answer, well-formed or hostile, goes to both parsers. Whatever ours accepts, h11 must
read the same way (status, headers, body); ours may refuse more than h11 does, never less. Well-formed
answers must be accepted.
"""

import asyncio

import h11
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from notifications.backends.http11 import LocalProtocolError, ProtocolError, Response, request_bytes

Parsed = tuple[int, list[tuple[bytes, bytes]], bytes]


def _fed(data: bytes) -> asyncio.StreamReader:
    """A reader holding `data` and then the peer's close (call inside a running loop)."""
    reader = asyncio.StreamReader(limit=65536)
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def ours(data: bytes) -> Parsed | None:
    """(status, headers with lower-case names, body), or None when our parser refuses the answer."""

    async def go() -> Parsed | None:
        response = Response(_fed(data))
        try:
            await response.head()
            body = b""
            while chunk := await response.chunk():
                body += chunk
        except ProtocolError:
            return None
        return response.status, [(n.lower(), v) for n, v in response.headers], body

    return asyncio.run(go())


def oracle(data: bytes) -> Parsed | None:
    """The same through h11, as httpx's own transport reads it."""
    connection = h11.Connection(our_role=h11.CLIENT)
    connection.send(h11.Request(method="POST", target="/push", headers=[("Host", "x"), ("Content-Length", "0")]))
    connection.send(h11.EndOfMessage())
    connection.receive_data(data)
    connection.receive_data(b"")
    status, headers, body = 0, [], b""
    try:
        while True:
            event = connection.next_event()
            if isinstance(event, h11.Response):
                status, headers = event.status_code, list(event.headers)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, headers, body
            elif isinstance(event, h11.InformationalResponse):
                continue
            else:  # NEED_DATA after EOF, ConnectionClosed before the end: no complete answer
                return None
    except h11.RemoteProtocolError:
        return None


# --- generated answers ----------------------------------------------------------------------------

names = st.sampled_from([b"Content-Type", b"X-Id", b"Retry-After", b"Date", b"Location", b"apns-id", b"Server"])
values = st.binary(max_size=20).filter(lambda v: b"\n" not in v and b"\r" not in v)
plain_values = st.text(alphabet="abcdefghij0123456789 ,;=/-:", max_size=20).map(str.encode)


@st.composite
def well_formed(draw: st.DrawFn) -> bytes:
    status = draw(st.sampled_from([200, 201, 202, 204, 304, 400, 401, 404, 410, 429, 500, 503]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0"]))
    reason = draw(st.sampled_from([b"OK", b"", b"Too Many Requests", b"Gone"]))
    headers = draw(st.lists(st.tuples(names, plain_values), max_size=6))
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    if status in (204, 304):
        framing, body = "length", b""
    if version == b"HTTP/1.0" and framing == "chunked":
        framing = "length"
    head = [b"%s %d %s" % (version, status, reason)]
    head += [name + b": " + value for name, value in headers]
    if framing == "length":
        head.append(b"Content-Length: %d" % len(body))
        wire_body = body
    elif framing == "chunked":
        head.append(b"Transfer-Encoding: chunked")
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if body[a:b]]
        wire_body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    else:
        wire_body = body
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" if draw(st.booleans()) else b""
    return interim + b"\r\n".join(head) + b"\r\n\r\n" + wire_body


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    """A well-formed answer damaged: bytes flipped, cut, inserted, or framing headers made to conflict."""
    data = bytearray(draw(well_formed()))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "header"]))
        if kind == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.sampled_from(b"\r\n\x00 \t:;,0aZ\x7f\xff"))
        elif kind == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif kind == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.sampled_from([b"\r\n", b"\n", b" ", b"\r", b"\x00", b"5", b"-1", b"\r\n\r\n"]))
        else:
            at = data.find(b"\r\n")
            if at >= 0:
                extra = draw(
                    st.sampled_from(
                        [
                            b"Content-Length: 3",
                            b"Content-Length: 3, 3",
                            b"Content-Length: +3",
                            b"Content-Length: 99999999999999999999",
                            b"Transfer-Encoding: gzip, chunked",
                            b"Transfer-Encoding: chunked",
                            b"Transfer-Encoding: identity",
                            b"Connection: close",
                            b" folded",
                            b"Bad Name: x",
                            b"X: a\x00b",
                        ]
                    )
                )
                data[at + 2 : at + 2] = extra + b"\r\n"
    return bytes(data)


fuzz = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fuzz
@given(well_formed())
def test_well_formed_answers__read_exactly_as_h11_reads_them(data: bytes) -> None:
    mine = ours(data)
    assert mine is not None, data
    assert mine == oracle(data)


@fuzz
@given(hostile())
@example(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
@example(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd")
@example(b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n")
@example(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
@example(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
@example(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n")
@example(b"HTTP/1.1 200 OK\r\nX: \x00\r\nContent-Length: 0\r\n\r\n")
@example(b"HTTP/2 200\r\n\r\n")
@example(b"HTTP/1.1 000 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
@example(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\n\n\r\n")  # a bare LF after the size
@example(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n")
@example(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\r\n\n")  # a trailer line that is no field
@example(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: \x01\r\n\r\n")
def test_hostile_answers__ours_accepts_only_what_h11_reads_the_same_way(data: bytes) -> None:
    mine = ours(data)
    if mine is not None:
        assert mine == oracle(data), data


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "more than 100"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", "longer than 64 KiB"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "both"),
    ],
)
def test_refusals_say_why(data: bytes, why: str) -> None:
    async def go() -> str:
        with pytest.raises(ProtocolError) as refused:
            await Response(_fed(data)).head()
        return str(refused.value)

    assert why in asyncio.run(go())


@given(st.binary(max_size=30))
def test_no_header_value_puts_a_line_break_or_nul_on_the_wire(value: bytes) -> None:
    try:
        wire = request_bytes(b"POST", b"/push", [(b"Host", b"x"), (b"X-Value", value)], b"{}")
    except LocalProtocolError:
        assert any(c in value for c in b"\r\n\x00") or any(c < 0x20 and c != 0x09 or c == 0x7F for c in value)
        return
    head = wire.split(b"\r\n\r\n", 1)[0]
    assert head.count(b"\r\n") == 3  # request line, Host, X-Value, Content-Length: one field per line
    assert b"\x00" not in head and b"\n" not in head.replace(b"\r\n", b"")

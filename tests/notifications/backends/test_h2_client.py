"""The lean HTTP/2 client (`notifications.backends.h2transport`) against hostile peers, at the backend level.

The wire-fault suite (`test_wire_faults.py`) holds the client to "unknown only when a HEADERS frame
reached the peer on a stream it did not refuse". These cases add what a client of its own must get
right: each answer bound to its own stream, flow control, a peer that answers on a stream never
opened, a peer without HTTP/2, stream ids running out, and a connection that comes back after a
GOAWAY or a drop.
"""

import asyncio
import ssl
import threading
import uuid

import pytest

from notifications.backends.apns import APNsBackend, apns_id
from notifications.backends.base import Outcome
from notifications.backends.fcm import FCMBackend
from notifications.backends.h2transport import H2Client, check_headers

from .conftest import message, run, send_all
from .test_wire_faults import apns_backend, apns_tokens, arrived, assert_truthful


def test_the_backends_use_the_lean_client(apns_options, fcm_options):
    assert isinstance(APNsBackend(alias="a", options=apns_options, timeout=1, concurrency=1).make_client(), H2Client)
    assert isinstance(FCMBackend(alias="f", options=fcm_options, timeout=1, concurrency=1).make_client(), H2Client)


def test_every_answer_is_bound_to_its_own_stream(apns, apns_options):
    # The fake echoes each request's apns-id: 60 sends in flight on one connection, each result must
    # carry the id of its own request and no other.
    messages = [message(token) for token in apns_tokens(60)]

    results = run(send_all(apns_backend(apns_options, timeout=10.0, concurrency=60), messages))

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 60
    assert [r.provider_message_id for r in results] == [apns_id(m.idempotency_key) for m in messages]
    assert apns.stats()["connections"] == 1  # one connection multiplexed them all


def test_a_16_byte_stream_window__bodies_go_out_in_pieces_and_arrive_whole(apns, apns_options):
    apns.configure(wire="tiny_window")
    tokens = apns_tokens(8)

    results = run(send_all(apns_backend(apns_options, timeout=10.0), [message(t, body="x" * 300) for t in tokens]))

    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert sorted(d.token for d in apns.deliveries()) == sorted(tokens)
    assert {d.message["aps"]["alert"]["body"] for d in apns.deliveries()} == {"x" * 300}


def test_bodies_past_the_connection_window__each_waits_its_turn_and_arrives_whole(apns, apns_options, monkeypatch):
    """100 bodies of 3 KB outgrow the peer's 64 KiB connection window. Each must wait for room before
    its stream opens and be woken on its own, not with every other waiting sender at every answer and
    WINDOW_UPDATE (which made the looks at the window grow as the square of the senders)."""
    import h2.connection

    looks = 0
    window = h2.connection.H2Connection.local_flow_control_window

    def counted(self, stream_id):
        nonlocal looks
        looks += 1
        return window(self, stream_id)

    monkeypatch.setattr(h2.connection.H2Connection, "local_flow_control_window", counted)
    tokens = apns_tokens(100)
    backend = apns_backend(apns_options, timeout=10.0, concurrency=100)

    results = run(send_all(backend, [message(t, body="x" * 3000) for t in tokens]))

    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert sorted(d.token for d in apns.deliveries()) == sorted(tokens)
    assert {d.message["aps"]["alert"]["body"] for d in apns.deliveries()} == {"x" * 3000}
    # A body of 3 KB goes out in one frame once there is room: three looks at the window (this
    # client's and h2's own checks of that frame). Waking every waiting sender at every change made
    # about nine a body at 100 senders, and more the more senders wait.
    assert looks <= 4 * len(tokens), looks


def test_a_peer_that_never_opens_its_connection_window__the_requests_that_wait_for_room_sent_nothing(
    apns, apns_options
):
    apns.configure(wire="shut_window")
    tokens = apns_tokens(30)
    backend = apns_backend(apns_options, timeout=1.0, concurrency=30)

    results = run(send_all(backend, [message(t, body="x" * 3000) for t in tokens]))

    delivered = {d.token for d in apns.deliveries()}
    # What fit in the 64 KiB window went out whole and was answered; the rest never opened a stream.
    assert 15 <= len(delivered) < len(tokens)
    waited = [r for t, r in zip(tokens, results, strict=True) if t not in delivered]
    assert {r.outcome for r in waited} == {Outcome.TEMPORARY}
    assert all(r.sent is False and "connection window" in r.reason for r in waited), waited[0].reason
    assert arrived(apns) == delivered  # no HEADERS of a waiting request reached the peer
    assert_truthful(apns, tokens, results)


def test_an_answer_on_a_stream_never_opened__never_taken_as_any_requests_answer(apns, apns_options):
    apns.configure(wire="stray_stream", hang_seconds=3.0)
    tokens = apns_tokens(4)

    results = run(send_all(apns_backend(apns_options, timeout=2.0), [message(t) for t in tokens]))

    # The peer broke the protocol: the connection is dropped, and nothing on it is called delivered.
    assert apns.deliveries() and Outcome.DELIVERED not in {r.outcome for r in results}
    assert_truthful(apns, tokens, results)
    for token, result in zip(tokens, results, strict=True):
        if token in arrived(apns):
            assert result.outcome == Outcome.UNKNOWN and result.sent, result


@pytest.mark.parametrize("wire", ["goaway", "drop_before"])
def test_the_same_client_reconnects_after_a_goaway_or_a_drop(apns, apns_options, wire):
    apns.configure(wire=wire, goaway_after=1)
    backend = apns_backend(apns_options, timeout=3.0)
    first_tokens, later_tokens = apns_tokens(6), apns_tokens(6)

    async def scenario():
        try:
            first = await asyncio.gather(*(backend.send(message(t)) for t in first_tokens))
            apns.configure(wire="")
            return first, await asyncio.gather(*(backend.send(message(t)) for t in later_tokens))
        finally:
            await backend.aclose()

    first, later = run(scenario())

    assert_truthful(apns, first_tokens, first)
    assert {r.outcome for r in later} == {Outcome.DELIVERED}


def test_stream_ids_running_out__a_new_connection_and_nothing_lost(apns, apns_options):
    backend = apns_backend(apns_options, timeout=5.0)

    async def scenario():
        try:
            first = await backend.send(message("ab" * 32))
            ((connection,),) = backend.client._connections.values()
            connection.h2.highest_outbound_stream_id = 2**31 - 1  # the next stream id would not fit
            second = await backend.send(message("cd" * 32))
            ((now,),) = backend.client._connections.values()
            return first, second, connection, now
        finally:
            await backend.aclose()

    first, second, old, new = run(scenario())

    assert (first.outcome, second.outcome) == (Outcome.DELIVERED, Outcome.DELIVERED)
    assert new is not old and old.closed


class _Http11OnlyServer:
    """A TLS server whose ALPN offers only http/1.1, answering nothing: a peer without HTTP/2."""

    def __init__(self, keys, answer: bytes = b"") -> None:
        self.answer = answer
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(keys.server_cert, keys.server_key)
        self.context.set_alpn_protocols(["http/1.1"])
        self.loop = asyncio.new_event_loop()
        self.requests = 0
        started = threading.Event()

        async def serve():
            self.server = await asyncio.start_server(self._client, "127.0.0.1", 0, ssl=self.context)
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()

        self.thread = threading.Thread(target=lambda: (self.loop.run_until_complete(serve()), self.loop.run_forever()))
        self.thread.start()
        started.wait(10)

    async def _client(self, reader, writer) -> None:
        if await reader.read(65536):
            self.requests += 1
            if self.answer:
                writer.write(self.answer)
                await writer.drain()
        writer.close()

    def stop(self) -> None:
        # Handlers of connections still open end first: a handler left pending when the loop stops is
        # reported "never awaited" whenever the collector frees it, inside a later test.
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _close(self) -> None:
        self.server.close()
        handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


def test_a_peer_without_http2__nothing_sent(apns_options, keys):
    server = _Http11OnlyServer(keys)
    try:
        options = {**apns_options, "host": f"127.0.0.1:{server.port}"}
        (result,) = run(send_all(apns_backend(options, timeout=3.0), [message("ab" * 32)]))
    finally:
        server.stop()

    assert (result.outcome, result.sent) == (Outcome.TEMPORARY, False)
    assert "ALPN" in result.reason and "nothing was sent" in result.reason
    assert server.requests == 0


@pytest.mark.parametrize(
    "header",
    [
        (b"x-a", b"line\r\nbreak"),
        (b"X-Upper", b"v"),
        (b"x-nul", b"a\x00b"),
        (b"connection", b"close"),
        (b"x-sp", b" v"),
    ],
)
def test_a_malformed_request_header_is_refused_before_anything_is_sent(header):
    with pytest.raises(ValueError, match="not valid in HTTP/2"):
        check_headers([header])


def test_a_malformed_header_from_a_backend__temporary_and_nothing_sent(apns, apns_options):
    backend = apns_backend(apns_options)
    backend.topic = "com.example.app\r\nx-injected: 1"

    (result,) = run(send_all(backend, [message("ab" * 32)]))

    assert (result.outcome, result.sent) == (Outcome.TEMPORARY, False)
    assert apns.stats()["requests"] == 0


def test_unique_ids_for_the_bench_tokens():
    # (a guard for the helpers above: tokens never repeat within a test)
    assert len(set(apns_tokens(50))) == 50 and uuid.UUID(apns_id("k"))


def test_webpush__a_push_service_without_http2_is_sent_to_over_http11_once(webpush, webpush_options, keys):
    import json

    from notifications.backends.webpush import WebPushBackend

    server = _Http11OnlyServer(keys, answer=b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    sub = webpush.subscription("h1")
    token = json.dumps(
        {"endpoint": f"https://127.0.0.1:{server.port}/push/h1", "keys": {"p256dh": sub.p256dh, "auth": sub.auth}}
    )
    try:
        backend = WebPushBackend(alias="webpush", options=webpush_options, timeout=5.0, concurrency=2)
        (result,) = run(send_all(backend, [message(token)]))
    finally:
        server.stop()

    # The HTTP/2 try ended at ALPN with nothing sent; the one request went over HTTP/1.1.
    assert (result.outcome, result.http_status) == (Outcome.DELIVERED, 201), result
    assert server.requests == 1


class _ClosingTransport(asyncio.Transport):
    """A transport already closing: asyncio would drop anything written to it without a word."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def is_closing(self) -> bool:
        return True

    def write(self, data: bytes) -> None:  # pragma: no cover - the client must not call it
        self.written.append(bytes(data))


class _Progress:
    def __init__(self) -> None:
        self.sent = 0

    def at(self, phase: str) -> None:
        pass

    def mark_sent(self) -> None:
        self.sent += 1


def test_a_request_handed_to_a_closing_transport_is_not_called_sent():
    """The bytes of a write to a closing transport never leave: 'nothing was sent', never 'unknown'."""
    from notifications.backends.h2transport import H2Failure, _Connection, _Stream

    async def scenario() -> tuple[H2Failure, int, list[bytes], str]:
        connection = _Connection()
        connection.connection_made(_ClosingTransport())
        connection.h2.initiate_connection()
        stream_id = connection.h2.get_next_available_stream_id()
        request = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a.example"), (b":path", b"/")]
        connection.h2.send_headers(stream_id, request, end_stream=True)
        stream = _Stream(asyncio.get_running_loop().create_future(), 1024)
        connection.streams[stream_id] = stream
        progress = _Progress()
        with pytest.raises(H2Failure) as raised:
            connection.hand_over(stream, progress)
        # And a connection lost before the hand-over fails its stream as unsent too.
        connection._lose("the connection was lost (test)")
        with pytest.raises(H2Failure) as lost:
            await stream.future
        return raised.value, progress.sent, connection.transport.written, lost.value.kind  # type: ignore[union-attr]

    failure, marked, written, lost_kind = asyncio.run(scenario())
    assert (failure.kind, failure.sent, marked, written) == ("unreachable", False, 0, [])
    assert lost_kind == "unreachable"


@pytest.mark.parametrize("table_size", [4096, 160, 0])
def test_the_memoised_hpack_encoder_says_what_hpack_says(table_size):
    # The client's encoder reuses encodings while the dynamic table is unchanged. Whatever it emits
    # must decode, in a stock decoder that follows the same table, to exactly the fields given: over
    # repeated, new and volatile fields, evictions (a small table) and a table size update.
    import hpack

    from notifications.backends.h2transport import _Encoder

    encoder, decoder = _Encoder(), hpack.Decoder()
    requests = []
    for i in range(120):
        fields = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"push.example:443"),
                  (b"authorization", b"bearer " + (b"a" * 60 if i < 60 else b"b" * 60)),
                  (b"apns-topic", b"com.example.%d" % (i % 3)), (b"x-new", b"v%d" % i),
                  hpack.NeverIndexedHeaderTuple(b":path", b"/3/device/%040d" % i),
                  hpack.NeverIndexedHeaderTuple(b"content-length", b"%d" % (i * 7))]  # fmt: skip
        requests.append(fields)
    for i, fields in enumerate(requests):
        if i == 70:
            encoder.header_table_size = table_size  # as a peer's SETTINGS_HEADER_TABLE_SIZE does
        block = encoder.encode(fields)
        assert [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)] == [(n, v) for n, v in fields]


@pytest.mark.parametrize("table_size", [4096, 200, 0])
def test_the_memoised_hpack_decoder_says_what_hpack_says(table_size):
    # The client's decoder looks up blocks that left the dynamic table as it was. Over answers that
    # repeat (all indexes), answers with a new value (an insertion), evictions (a small table), a table
    # size update and never-indexed fields, it must give what a stock decoder gives, block by block,
    # with the same table afterwards; and a block it refuses, it refuses again.
    import hpack

    from notifications.backends.h2transport import _Decoder

    encoder, ours, stock = hpack.Encoder(), _Decoder(), hpack.Decoder()
    looked_up = 0
    for i in range(150):
        if i == 90:
            encoder.header_table_size = table_size  # the size update leads the next block
        fields = [(b":status", b"200" if i % 7 else b"429"), (b"content-type", b"application/json"),
                  (b"date", b"Sat, 05 Dec 2026 00:00:%02d GMT" % (i // 20)), (b"server", b"ESF"),
                  (b"x-seq", b"%d" % (i // 40)), hpack.NeverIndexedHeaderTuple(b"x-id", b"%d" % (i % 2))]  # fmt: skip
        block = encoder.encode(fields)
        before = len(ours._blocks)
        got = [(bytes(n), bytes(v)) for n, v in ours.decode(block, raw=True)]
        looked_up += before == len(ours._blocks) and block in ours._blocks
        assert got == [(bytes(n), bytes(v)) for n, v in stock.decode(block, raw=True)] == [(n, v) for n, v in fields]
        assert list(ours.header_table.dynamic_entries) == list(stock.header_table.dynamic_entries)
    if table_size:
        assert looked_up > 50  # the repeats were looked up, not decoded again
    ours.max_header_list_size = 10
    with pytest.raises(hpack.OversizedHeaderListError):
        ours.decode(block, raw=True)  # a limit lowered after a block was remembered still applies


def test_volatile_fields_of_any_length_decode_as_given_while_the_table_stays():
    # With the dynamic table unchanged, a volatile field is its name's remembered encoding plus the
    # client's own string literal: lengths on both sides of the 7-bit prefix (127) must decode exactly.
    import hpack

    from notifications.backends.h2transport import _Encoder

    encoder, decoder = _Encoder(), hpack.Decoder()
    for size in [*range(120, 135), 0, 1, 255, 300, 4000]:
        fields = [(b":method", b"POST"), (b":authority", b"push.example:443"),
                  hpack.NeverIndexedHeaderTuple(b":path", b"/m/" + b"p" * size),
                  hpack.NeverIndexedHeaderTuple(b"topic", b"t" * size)]  # fmt: skip
        block = encoder.encode(fields)
        assert [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)] == [(n, v) for n, v in fields]


def test_a_url_the_client_refuses_is_refused_every_time():
    # The client remembers the URLs it split; one it refused is never remembered, so it never becomes
    # sendable by being asked about twice.
    client = H2Client()
    for url in ["http://push.example/x", "https://user@push.example/x", "https://push.example:0/x"] * 2:
        with pytest.raises(ValueError):
            client.speaks_http2(url)
    assert client.speaks_http2("https://push.example/x") and client.speaks_http2("https://push.example/x")


def test_the_requests_one_lost_connection_took_with_it_share_one_incident(apns, apns_options):
    # One connection drops with every stream on it: one event, which the breaker must count once.
    # The fake drops each connection at its first request, so a round's requests share one only when
    # they all left before the drop: each round first waits for a connection whose peer's SETTINGS
    # arrived (until then a new connection carries one stream).
    apns.configure(wire="drop_before")
    backend = apns_backend(apns_options, timeout=3.0, concurrency=10)

    async def settled_connection():
        client = backend.client
        host, port, _, _ = client._parts(f"https://{apns_options['host']}/")
        connection = await client._connect((host, port), _Progress())
        while not connection.settled:
            await asyncio.sleep(0.005)

    async def scenario():
        try:
            await settled_connection()
            first = await asyncio.gather(*(backend.send(message(t)) for t in apns_tokens(10)))
            await settled_connection()
            return first, await asyncio.gather(*(backend.send(message(t)) for t in apns_tokens(10)))
        finally:
            await backend.aclose()

    first, second = run(scenario())

    assert {r.outcome for r in first + second} <= {Outcome.UNKNOWN, Outcome.TEMPORARY}
    incidents = [{r.incident for r in results} for results in (first, second)]
    assert all(len(names) == 1 and "" not in names for names in incidents), incidents
    assert incidents[0] != incidents[1]  # a new connection, a new incident


def test_a_graceful_goaway__the_streams_below_it_are_still_answered_and_the_rest_never_processed(apns, apns_options):
    # The peer says GOAWAY as soon as its fifth stream arrives, before answering anything (a provider
    # rotating a connection). The five are answered afterwards; the streams above them were never
    # processed. Nothing is unknown, and each delivery happened once.
    apns.configure(wire="goaway_graceful", goaway_after=5, latency_ms=150)
    tokens = apns_tokens(12)
    backend = apns_backend(apns_options, timeout=5.0, concurrency=12)

    results = run(send_all(backend, [message(t) for t in tokens]))

    by_token = dict(zip(tokens, results, strict=True))
    delivered = [t for t, r in by_token.items() if r.outcome == Outcome.DELIVERED]
    assert len(delivered) == 5 and sorted(delivered) == sorted(arrived(apns))
    assert sorted(d.token for d in apns.deliveries()) == sorted(delivered)
    rest = [r for t, r in by_token.items() if t not in delivered]
    assert {(r.outcome, r.sent) for r in rest} == {(Outcome.TEMPORARY, False)}
    assert all("GOAWAY" in r.reason and "not processed" in r.reason for r in rest)
    assert_truthful(apns, tokens, results)


class _Unheard:
    """A request's progress nobody listens to."""

    def at(self, phase: str) -> None:
        pass

    def mark_sent(self) -> None:
        pass


def test_a_connect_every_sender_gave_up_on_leaves_no_exception_unretrieved():
    # The sender's own deadline ends first; the shared connect (shielded from it) fails later, with no
    # one awaiting it. Unretrieved, its exception was logged whenever the collector freed the task,
    # from inside whatever the process was running then.
    import gc

    async def scenario():
        loop = asyncio.get_running_loop()
        reported: list[dict] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        held = []

        async def silent(reader, writer):  # TCP, never any TLS, and never closed by the server
            # The writer is kept: from Python 3.13 a collected StreamWriter closes its connection, which
            # would fail the handshake at once instead of leaving it to time out.
            held.append(writer)
            await reader.read()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = H2Client(connect_timeout=0.3)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await client.exchange("POST", f"https://127.0.0.1:{port}/x", [], b"", cap=100, progress=_Unheard())
            await asyncio.sleep(0.6)  # the connect's own timeout passes: it fails, awaited by nobody
            gc.collect()
            await asyncio.sleep(0)
        finally:
            await client.aclose()
            for writer in held:
                writer.close()
            server.close()
        return reported

    reported = run(scenario())

    assert [c for c in reported if "never retrieved" in str(c.get("message"))] == []


@pytest.mark.parametrize(
    ("limit", "window", "connections"),
    [
        (100, 250, 3),  # FCM's front ends: 100 streams a connection, so a window of 250 needs three
        (100, 100, 1),  # the window fits one connection: no second one
        (10, 250, 1),  # a limit this low is the peer asking for less: one connection, its limit kept
    ],
)
def test_a_peer_stream_limit_below_the_window__more_connections_only_when_it_is_a_capacity(
    apns, apns_options, limit, window, connections
):
    # The answers wait 300 ms, so the whole window is in flight at once before any returns.
    apns.configure(wire="stream_limit", stream_limit=limit, latency_ms=300)
    tokens = apns_tokens(250)
    messages = [message(t) for t in tokens]

    results = run(send_all(apns_backend(apns_options, timeout=20.0, concurrency=window), messages))

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * len(tokens)
    assert [r.provider_message_id for r in results] == [apns_id(m.idempotency_key) for m in messages]
    wire = apns.stats()["wire"]
    assert wire["connections"] == connections
    assert wire["refused"] == 0  # no stream ever went over a connection's announced limit
    assert wire["peak_in_flight"] <= limit * connections
    if connections > 1:
        assert wire["peak_in_flight"] > limit  # the extra connections carried streams at the same time


def test_an_extra_connection_that_fails_to_open__the_open_one_carries_the_window_in_turn(apns, apns_options):
    """A second connect refused (the origin's listener gone for new connections): the requests wait for
    the first connection's slots rather than fail, and none is called sent that was not."""
    apns.configure(wire="stream_limit", stream_limit=100, latency_ms=200)
    tokens = apns_tokens(150)
    backend = apns_backend(apns_options, timeout=20.0, concurrency=150)
    connects = 0

    async def scenario():
        client = backend.client
        opened = client._open

        async def once(origin, progress):
            nonlocal connects
            connects += 1
            if connects > 1:
                from notifications.backends.h2transport import H2Failure

                raise H2Failure("unreachable", "refused for the test", incident="test")
            return await opened(origin, progress)

        client._open = once
        return await send_all(backend, [message(t) for t in tokens])

    results = run(scenario())

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * len(tokens)
    assert apns.stats()["wire"]["connections"] == 1
    assert connects == 2  # one extra attempt, then the open connection serves until the pause ends


def test_bodies_past_the_window_of_several_connections__every_one_goes_out(apns, apns_options):
    """Several connections to one origin, each with more bodies waiting than its 64 KiB window holds. A
    sender woken for room in one connection's window and then sent to another must pass that room on:
    otherwise the senders behind it on the first sleep until their deadline, with nothing in flight there
    to bring another WINDOW_UPDATE."""
    # Each answer waits 2 s: a connection fills its 100 streams (300 KB through a 64 KiB window, several
    # WINDOW_UPDATE round trips) before any is answered, however slow a loaded machine makes those trips.
    apns.configure(wire="stream_limit", stream_limit=100, latency_ms=2000)
    tokens = apns_tokens(600)
    backend = apns_backend(apns_options, timeout=20.0, concurrency=300)

    results = run(send_all(backend, [message(t, body="x" * 3000) for t in tokens]))

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * len(tokens), {r.reason for r in results}
    # Several connections (a sender waiting for window room gives its slot up, so fewer may look full).
    assert apns.stats()["wire"]["connections"] >= 2


class _OpenTransport(asyncio.Transport):
    def is_closing(self) -> bool:
        return False

    def write(self, data) -> None:
        pass


def test_a_connect_that_ended_before_its_callback_ran__a_sender_waits_for_a_slot_instead_of_spinning():
    """The connect's own callback (which forgets it) runs on a later turn of the loop. A sender that looks in
    between, finding the new connection still without a free slot, must wait: awaiting the ended connect
    again returns at once without yielding, so the loop (and that callback) never ran again."""
    from notifications.backends.h2transport import _Connection

    async def scenario():
        client = H2Client()
        origin = ("push.example", 443)
        connection = _Connection()
        connection.connection_made(_OpenTransport())
        connection.streams[1] = object()  # its one stream before the peer's SETTINGS: no free slot
        looks = 0
        has_slot = connection.has_slot

        def counted() -> bool:
            nonlocal looks
            looks += 1
            if looks > 1000:
                raise RuntimeError("the sender spins")
            return has_slot()

        connection.has_slot = counted
        ended = asyncio.get_running_loop().create_future()
        ended.set_result(connection)
        client._connecting[origin] = ended
        client._connections[origin] = [connection]
        sender = asyncio.ensure_future(client._stream_slot(origin, _Progress()))
        await asyncio.sleep(0.05)
        waiting = not sender.done()
        connection.streams.clear()  # its stream ended
        connection.waiters.slot_freed()
        return waiting, looks, await asyncio.wait_for(sender, 1.0), connection

    waiting, looks, got, connection = run(scenario())

    assert waiting and looks < 10
    assert got is connection

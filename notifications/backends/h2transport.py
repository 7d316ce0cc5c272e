"""A lean HTTP/2 client for the push backends (FCM, APNs, Web Push): multiplexed connections on `h2`.

Why not httpx's HTTP/2 path (httpx -> httpcore -> anyio -> h2): a push worker spent most of its CPU in
the client layers around h2 rather than in h2, TLS or JSON (bench/results keeps the profiles). A push
backend needs one origin, one multiplexed connection and a truthful account of what left. This module is
that and no more: `h2.connection.H2Connection` (the maintained state machine, which does the framing,
HPACK and flow-control accounting) on an asyncio protocol, TLS from `ssl` with ALPN `h2`.

What callers can rely on (`capped_request()` turns the failures into `ExchangeFailed`):

- **Nothing sent** is said only when no HEADERS frame of the request was handed to the socket:
  waiting for the connection, TCP connect, TLS, ALPN, waiting for a stream under the peer's
  SETTINGS_MAX_CONCURRENT_STREAMS, or a connection that closed before the request went out.
  `progress.mark_sent()` is called once the HEADERS frame was handed to a transport still open
  (asyncio drops a write to a closing transport silently, so that write is not "sent").
- **Refused** (not processed, so nothing delivered): the peer reset the stream with REFUSED_STREAM,
  or sent GOAWAY with a last stream id below the stream.
- **Dropped** (the peer may have it): any other reset, the connection lost (a GOAWAY at or above the
  stream, then no answer before the connection went), a protocol error on the connection, after the
  HEADERS left.
- **Every answer is bound to its own stream**: h2 delivers each event with its stream id, and a
  stream's state (future, headers, body) is reached only through that id. A stream that was given up
  (its deadline passed, the body cap reached) is reset with CANCEL and forgotten, so a late answer
  finds nothing to attach to.
- The body is kept up to `cap` bytes; past that the stream is cancelled and the answer marked cut.
  Received DATA is acknowledged as it arrives, so one stream's cut or slow reader never stalls
  the connection window for the others.
- New streams wait for a slot when the peer's SETTINGS_MAX_CONCURRENT_STREAMS is reached, and a
  request body goes out within the peer's flow-control windows (waiting for WINDOW_UPDATE). Until
  the peer's first SETTINGS frame arrives, a new connection carries one stream (the limit is
  unknown; a guess above it would have every stream over it refused).
- One connection per origin, unless the peer's limit is below the caller's window (`streams`): then
  more are opened, only while every open one is full, up to the window's worth of the peer's limit.
  A peer that limits a connection to fewer than `_POOL_MIN_STREAMS` streams is asking for less, and
  gets one connection: more connections would only get around what it asked for.
- A connection that sent or received GOAWAY, lost its transport, ran out of stream ids, or sat with
  no stream open for `KEEPALIVE_SECONDS`, takes no new streams; the next request opens a new one.
  After a GOAWAY received, the streams at or below its last stream id are still read to their end.
"""

import asyncio
import itertools
import logging
import re
import ssl
import time
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import hpack

from notifications.backends.h2waiters import SendWaiters

KEEPALIVE_SECONDS = 5.0  # like httpx's default: a connection idle this long is closed, not reused
# A peer's frames that carry no answer (PING, PRIORITY, SETTINGS, WINDOW_UPDATE, 1xx, empty or tiny DATA,
# frames on streams that ended, unknown types) add to its connection's waste; every frame that moves an
# answer on (response headers, a body's data, a stream's end or reset) takes `_ANSWER_CREDIT` off it.
# A connection whose waste passes `WASTE_LIMIT` is closed (GOAWAY ENHANCE_YOUR_CALM): a legitimate
# server sends a few such frames per answer at most, a flood thousands a second.
WASTE_LIMIT = 500
_ANSWER_CREDIT = 8
_WASTE_BYTES = 4096  # a wasted frame also costs one more unit per this many bytes of payload
_USEFUL_DATA = 1024  # DATA smaller than this counts as an answer only when it ends its stream
_READ_SLICE = 16 * 1024  # bytes of frames handled per turn of the event loop; the rest waits its next turn
_READ_WINDOW = 1 << 20  # the connection receive window we offer (answers are small; this avoids stalls)
_REFUSED = h2.errors.ErrorCodes.REFUSED_STREAM
_CANCEL = h2.errors.ErrorCodes.CANCEL
_MEMO_FIELDS = 64  # encoded fields remembered per connection (a request has about ten)
_MEMO_URLS = 4096  # split URLs a client remembers (Web Push has one per device)
# A peer's stream limit at or above this is a server's capacity per connection (RFC 9113 recommends
# no less than 100; Google's front ends announce 100): when the caller's window is larger, more
# connections are opened. A lower limit is back-pressure, and is respected with one connection.
_POOL_MIN_STREAMS = 100
_RETRY_EXTRA_SECONDS = 5.0  # after a failed connect for another connection: use the open ones meanwhile
_serials = itertools.count(1)  # names connections and connect attempts (incidents) within a process
logger = logging.getLogger(__name__)
_pending = itertools.count(1)  # keys requests waiting for window room before they have a stream (as -n)

Headers = list[tuple[bytes, bytes]]
_STREAM_OPEN = h2.stream.STREAM_OPEN  # by stream state: whether it counts against the concurrency limit
_CLOSED = h2.stream.StreamState.CLOSED
# What h2's outbound validation would refuse, checked here once per header instead of through h2's
# chain of generators per header: lower-case token names, and values without NUL, CR, LF or
# surrounding whitespace.
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")
_VALUE = re.compile(rb"(?:[^\x00\r\n\t ][^\x00\r\n]*[^\x00\r\n\t ]|[^\x00\r\n\t ])?")


class _Encoder(hpack.Encoder):
    """HPACK without Huffman coding: the literals cost a few more bytes on the wire and much less CPU.

    Every field is indexable, the bearer token included: a push request's fields are the backend's
    own (the token, the topic, ids it derived), a compression oracle would need an attacker's field
    in the same context and the whole secret guessed at once (HPACK indexes whole values, RFC 7541
    section 7.1), and re-encoding the token on every request is work for nothing.

    A field's encoding depends only on the dynamic table, so while the table is unchanged a field
    seen before encodes to the same bytes: the fields that repeat on every request (method, scheme,
    authority, the token, the topic) are looked up in a memo rather than searched for (and logged)
    by hpack again, and a volatile field (never indexed, so it leaves the table as it is) reuses the
    encoding of its name. Any change to the table (an insertion, an eviction, a size update) empties
    the memo."""

    def __init__(self) -> None:
        super().__init__()
        self._fields: dict[tuple[bytes, bytes], bytes] = {}  # indexable field -> its encoding
        self._names: dict[bytes, bytes] = {}  # volatile field's name -> the encoding before its value

    def encode(self, headers: Any, huffman: bool = False) -> bytes:
        table = self.header_table
        if table.resized:
            self._forget()
            return super().encode(headers, huffman=False)  # emits the size update first
        fields, names, entries, block = self._fields, self._names, table.dynamic_entries, []
        for field in headers:
            name, value = field[0], field[1]
            if not getattr(field, "indexable", True):
                prefix = names.get(name)
                if prefix is None:
                    literal = self.add((name, value), True, False)  # never indexed: the table stays as it is
                    tail = _literal(value)
                    if literal.endswith(tail) and len(names) < _MEMO_FIELDS:
                        names[name] = literal[: len(literal) - len(tail)]
                    block.append(literal)
                else:
                    block.append(prefix + _literal(value))
                continue
            key = (name, value)
            encoded: bytes | None = fields.get(key)
            if encoded is None:
                size, first = len(entries), entries[0] if entries else None
                encoded = self.add(key, False, False)
                if len(entries) != size or (entries[0] if entries else None) is not first:
                    self._forget()  # the table changed: every index learned before may have moved
                elif len(fields) < _MEMO_FIELDS:
                    fields[key] = encoded
            block.append(encoded)
        return b"".join(block)

    def _forget(self) -> None:
        self._fields.clear()
        self._names.clear()


class _Decoder(hpack.Decoder):
    """HPACK decoding that remembers the blocks that left the dynamic table as it was.

    A provider's answers repeat their headers, and after the first answer most blocks are only indexes
    into the table (FCM's dozen headers: 12 bytes), yet hpack decodes each one again in full. Such a
    block decodes to the same headers for as long as the table is unchanged, so it is looked up instead.
    Any change to the table (an insertion, an eviction, a size update) empties the memo, so a block that
    changed it is forgotten before it could be looked up."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[bytes, list[Any]] = {}
        # The table the remembered blocks decoded in: its size, its limits, and its newest entry (by
        # identity: every insertion puts a new entry first, and every eviction comes with an insertion
        # or a size change).
        self._table_seen: tuple[Any, ...] = ()
        self._newest: Any = None

    def decode(self, data: bytes, raw: bool = False) -> Any:
        if not raw:
            return super().decode(data, raw=False)
        entries = self.header_table.dynamic_entries
        newest = entries[0] if entries else None
        table = (len(entries), self.header_table.maxsize, self.max_header_list_size, self.max_allowed_table_size)
        if table != self._table_seen or newest is not self._newest:
            self._blocks.clear()
            self._table_seen, self._newest = table, newest
        key = bytes(data)
        known = self._blocks.get(key)
        if known is not None:
            return list(known)
        headers = list(super().decode(data, raw=True))
        _remember(self._blocks, key, headers, _MEMO_FIELDS)  # if this block changed the table, the next call forgets it
        return list(headers)


def _literal(value: bytes) -> bytes:
    """A string literal without Huffman coding (RFC 7541 section 5.2): its length, then its bytes."""
    size = len(value)
    if size < 127:
        return _SHORT[size] + value  # the length fits the 7-bit prefix: one byte, H clear
    return bytes(hpack.hpack.encode_integer(size, 7)) + value


_SHORT = [bytes((size,)) for size in range(127)]


class H2Failure(Exception):
    """No complete answer. `kind`: "unreachable" (nothing sent), "refused" (not processed), "dropped".

    `incident` names the one event behind it when that event failed other requests too (a connection
    lost or sent away with streams open, one connect attempt that several requests waited for)."""

    def __init__(self, kind: str, detail: str, *, incident: str = "") -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.incident = incident

    @property
    def sent(self) -> bool:
        return self.kind == "dropped"


class NoHTTP2(H2Failure):
    """The peer finished TLS without choosing `h2` (ALPN): nothing was sent; an HTTP/1.1 client may try."""

    def __init__(self, detail: str) -> None:
        super().__init__("unreachable", detail)


class _Flood(h2.exceptions.ProtocolError):
    """The peer sent more frames carrying no answer than `WASTE_LIMIT` allows: h2 answers with GOAWAY
    (ENHANCE_YOUR_CALM, the code RFC 9113 gives for a peer generating excessive load) and closes."""

    error_code = h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


_ANSWERING = frozenset({h2.events.ResponseReceived, h2.events.TrailersReceived, h2.events.StreamEnded,
                        h2.events.StreamReset})  # fmt: skip


class _Stream:
    """One request's stream: what came back on it, and the future its sender awaits."""

    __slots__ = ("future", "status", "headers", "chunks", "size", "cap", "truncated", "sent")

    def __init__(self, future: "asyncio.Future[None]", cap: int) -> None:
        self.future = future
        self.status = 0
        self.headers: Headers = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.cap = cap
        self.truncated = False
        self.sent = False  # its HEADERS frame was handed to an open transport: it may have reached the peer

    def fail(self, kind: str, detail: str, *, incident: str = "") -> None:
        if not self.future.done():
            self.future.set_exception(H2Failure(kind, detail, incident=incident))

    def finish(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def cut(self, why: str, incident: str) -> None:
        """The connection went with this stream open: the peer may have it only if its HEADERS were handed over."""
        if self.sent:
            self.fail("dropped", f"{why} after the request was sent", incident=incident)
        else:
            self.fail("unreachable", f"{why} before the request was written", incident=incident)


class _CheckedStream(h2.stream.H2Stream):
    """h2's stream, except that a header list h2 already checked (and normalized) on this connection,
    under the same flags, is looked up rather than put through h2's chain of checks again.

    A provider's answers repeat the same fields (the decoder hands back the same objects), so checking
    them again on every answer is work for nothing. The
    checks themselves stay h2's: a list seen for the first time, or one h2 refused, goes through them."""

    checked: dict[tuple[Any, ...], list[Any]]

    def _process_received_headers(self, headers: Any, header_validation_flags: Any, header_encoding: Any) -> Any:
        if header_encoding:
            return super()._process_received_headers(headers, header_validation_flags, header_encoding)
        key = (tuple(headers), header_validation_flags)
        known = self.checked.get(key)
        if known is None:
            known = super()._process_received_headers(key[0], header_validation_flags, header_encoding)
            _remember(self.checked, key, known, _MEMO_FIELDS)
        return list(known)


class _H2Connection(h2.connection.H2Connection):
    """h2's connection, except when a GOAWAY arrives.

    h2 closes its whole state machine there, after which every frame raises ProtocolError. RFC 9113
    (section 6.8) lets the streams at or below the GOAWAY's last stream id still complete, and a
    provider rotating a connection answers them; with h2's behaviour each of those answers was lost
    and its request called unknown. Here the GOAWAY is reported (`ConnectionTerminated`) and the
    state machine stays open for what is still owed; `_Connection` opens no stream on it afterwards.
    """

    def __init__(self, config: h2.config.H2Configuration) -> None:
        super().__init__(config=config)
        self.checked_headers: dict[tuple[Any, ...], list[Any]] = {}  # `_CheckedStream`'s, shared by its streams
        # h2's count of our open streams, kept while no call could have closed one (None: count again).
        self._open_out: int | None = None
        self._closing_now = False  # inside such a call: states change as it goes, so nothing is kept
        self.waste = 0  # frames that carried no answer, less the credit of those that did (`_count`)
        self.wasted_frames = 0  # every frame that carried no answer, for the record
        self.events_in: list[h2.events.Event] = []  # what the frames read so far said (kept on a ProtocolError)
        # Whether a sender waits for the window a WINDOW_UPDATE on this stream (0: the connection) opens:
        # such an update moves a request on, and is no waste (a peer with a tiny window sends many).
        self.window_wanted: Callable[[int], bool] = lambda stream_id: False

    def _begin_new_stream(self, stream_id: int, allowed_ids: Any) -> h2.stream.H2Stream:
        stream = super()._begin_new_stream(stream_id, allowed_ids)
        stream.__class__ = _CheckedStream  # h2 builds the stream itself: only its class is ours
        stream.checked = self.checked_headers  # type: ignore[attr-defined]
        return stream

    def _receive_frame(self, frame: Any) -> list[h2.events.Event]:
        """Each frame's events go to `events_in` as they come, so that those of the frames before a
        protocol error (or a flood) in the same read are still handled; then the frame is counted."""
        events = super()._receive_frame(frame)
        self.events_in.extend(events)
        self._count(frame, events)
        return []

    def _count(self, frame: Any, events: list[h2.events.Event]) -> None:
        """Add a frame to the waste unless it moved an answer on; raise `_Flood` past the limit."""
        for event in events:
            kind = type(event)
            if kind in _ANSWERING or (
                kind is h2.events.DataReceived and len(event.data or b"") >= _USEFUL_DATA  # type: ignore[attr-defined]
            ):
                self.waste = max(0, self.waste - _ANSWER_CREDIT)
                return
            if kind is h2.events.WindowUpdated and self.window_wanted(event.stream_id or 0):  # type: ignore[attr-defined]
                return  # room a request body was waiting for: neither waste nor an answer
        self.wasted_frames += 1
        self.waste += 1 + getattr(frame, "body_len", 0) // _WASTE_BYTES
        if self.waste > WASTE_LIMIT:
            raise _Flood(f"{self.wasted_frames} frames that carried no answer (more than {WASTE_LIMIT} in a row)")

    def _receive_goaway_frame(self, frame: Any) -> tuple[list[Any], list[h2.events.Event]]:
        event = h2.events.ConnectionTerminated()
        try:
            event.error_code = h2.errors.ErrorCodes(frame.error_code)
        except ValueError:
            event.error_code = frame.error_code
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]

    # Only three kinds of call change how many of our streams are open: opening one (`send_headers` on a
    # new id: one more), and the calls that may close some (an answer read, our END_STREAM, a reset, the
    # end of the connection). Between them the count is kept, not walked again.

    def send_headers(self, stream_id: int, *args: Any, **kwargs: Any) -> None:
        opens = stream_id not in self.streams
        try:
            super().send_headers(stream_id, *args, **kwargs)
        except BaseException:
            self._open_out = None
            raise
        if not opens:
            self._open_out = None  # trailers may end a stream the peer has ended
        elif self._open_out is not None and stream_id % 2:
            self._open_out += 1  # a new stream is open (or half closed) as it leaves, whatever its flags

    def receive_data(self, data: Any) -> list[h2.events.Event]:
        """The events the frames in `data` raised. On a ProtocolError (a flood included), the events of
        the frames before it are in `events_in`."""
        self.events_in = []
        self._closing(super().receive_data, data)
        events, self.events_in = self.events_in, []
        return events

    def send_data(self, *args: Any, **kwargs: Any) -> None:
        self._closing(super().send_data, *args, **kwargs)

    def end_stream(self, *args: Any, **kwargs: Any) -> None:
        self._closing(super().end_stream, *args, **kwargs)

    def reset_stream(self, *args: Any, **kwargs: Any) -> None:
        self._closing(super().reset_stream, *args, **kwargs)

    def close_connection(self, *args: Any, **kwargs: Any) -> None:
        self._closing(super().close_connection, *args, **kwargs)

    def _closing(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run an h2 call that may close streams: the count is walked again after it (one taken during it,
        half done, is not kept)."""
        self._open_out, outer, self._closing_now = None, self._closing_now, True
        try:
            return call(*args, **kwargs)
        finally:
            self._open_out, self._closing_now = None, outer

    def _open_streams(self, remainder: int) -> int:
        """h2's count of open streams of one parity (pruning the closed ones as it goes), its properties inlined.

        h2 counts on every new stream (and `has_slot` asks first), walking every stream it holds through
        two properties a stream, so with many in flight each count grows with them; this one does the
        same walk reading the state once (tests/notifications/backends/test_h2_streams.py compares them).
        Our own streams' count is kept until a call may have closed one (above): senders ask for it on
        every request, and each ask would walk every stream."""
        if remainder == 1 and self._open_out is not None:
            return self._open_out
        count = 0
        closed = []
        for stream_id, stream in self.streams.items():
            state = stream.state_machine.state
            if _STREAM_OPEN[state]:
                count += stream_id % 2 == remainder
            elif state is _CLOSED:
                closed.append(stream_id)
        for stream_id in closed:
            self._closed_streams[stream_id] = self.streams.pop(stream_id).closed_by
        if remainder == 1 and not self._closing_now:
            self._open_out = count
        return count


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection: the h2 state machine, the transport, and the streams open on it.

    Each connection keeps to a budget, so that one peer cannot take the event loop from every other
    origin and backend: at most `_READ_SLICE` bytes of its frames are handled per turn of the loop
    (reading pauses until the rest is done), a flood of frames that carry no answer closes it
    (`WASTE_LIMIT`), it is closed after `KEEPALIVE_SECONDS` with no stream open, and once it is shut
    nothing more it sends is read or answered."""

    def __init__(self, where: str = "") -> None:
        # Outbound headers are checked by `check_headers` (the client builds them lower-case).
        config = h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False
        )
        self.h2 = _H2Connection(config=config)
        self.h2.encoder = _Encoder()
        decoder = _Decoder()
        decoder.max_header_list_size = self.h2.decoder.max_header_list_size  # h2's bound on an answer's headers
        self.h2.decoder = decoder
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
        self.closed = False  # no new streams: lost, GOAWAY, out of ids, or closed by us
        self.why_closed = ""
        # What every stream this connection fails at once has in common: one event, counted once.
        self.incident = f"h2 connection {next(_serials)}"
        self.idle_since = time.monotonic()
        self.settled = False  # the peer's first SETTINGS frame arrived: its stream limit is known
        # The senders waiting here for a stream slot or for flow-control room, each woken on its own.
        self.waiters = SendWaiters()
        self.h2.window_wanted = self.waiters.waiting_for_window
        self.where = where  # host:port, for the one log line a closing connection may write
        self.shut = False  # the transport was closed or aborted, or the peer ended TLS: nothing more is read or written
        self._backlog = b""  # received bytes waiting for the next turn of the loop (reading paused meanwhile)
        self._paused = False  # reading paused for the backlog
        self._idle_timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.shut:
            return  # closed on our side: a peer still writing is neither read nor answered
        if self._backlog:
            self._backlog += data  # behind what waits for the next turn
            return
        self._take(data)

    def _take(self, data: bytes) -> None:
        """Handle at most `_READ_SLICE` bytes now; the rest on the loop's next turn, reading paused meanwhile."""
        if len(data) > _READ_SLICE:
            self._backlog = data[_READ_SLICE:]
            data = data[:_READ_SLICE]
            if self.transport is not None:
                self.transport.pause_reading()
                self._paused = True
                asyncio.get_running_loop().call_soon(self._take_backlog)
        self._receive(data)

    def _take_backlog(self) -> None:
        data, self._backlog = self._backlog, b""
        if self.shut:
            return
        self._take(data)
        if not self._backlog and not self.shut and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def _receive(self, data: bytes) -> None:
        failure: Exception | None = None
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            failure = exc
            events, self.h2.events_in = self.h2.events_in, []
        try:
            for event in events:  # the frames before a protocol error were fine: their answers stand
                self._on(event)
        except Exception as exc:  # noqa: BLE001 - a peer's answer this client cannot read must not reach asyncio
            failure = failure or exc
        if failure is None:
            self.flush()
            return
        self.flush()  # h2's GOAWAY (ENHANCE_YOUR_CALM for a flood, PROTOCOL_ERROR otherwise) goes out first
        if isinstance(failure, _Flood):
            why = f"the peer flooded the connection with {failure}"
        else:
            why = f"the peer broke the HTTP/2 protocol ({type(failure).__name__}: {failure})"
        logger.warning("Closed the HTTP/2 connection to %s: %s", self.where or "a push service", why)
        self._lose(why, graceful=True)

    def eof_received(self) -> bool | None:
        self.shut = True  # the peer ended TLS: whatever h2 would still write is dropped by the transport
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        why = f"the connection was lost ({type(exc).__name__}: {exc})" if exc else "the peer closed the connection"
        self._lose(why)

    def _watch_idle(self) -> None:
        """Close the connection once no stream was open on it for `KEEPALIVE_SECONDS` (checked that often):
        a peer may not keep a connection nobody uses, nor use it to talk to a client that is not listening."""
        self._idle_timer = None
        if self.shut:
            return
        if not self.streams and time.monotonic() - self.idle_since >= KEEPALIVE_SECONDS:
            self.close()
            return
        self._idle_timer = asyncio.get_running_loop().call_later(KEEPALIVE_SECONDS, self._watch_idle)

    # --- events ---------------------------------------------------------------------------------------

    def _on(self, event: h2.events.Event) -> None:
        kind = type(event)
        if kind is h2.events.DataReceived:
            self._on_data(event)  # type: ignore[arg-type]
        elif kind is h2.events.ResponseReceived:
            stream = self.streams.get(event.stream_id)  # type: ignore[attr-defined]
            if stream is not None:
                self._on_headers(stream, event.stream_id, event.headers or [])  # type: ignore[attr-defined]
        elif kind is h2.events.StreamEnded:
            stream_id = event.stream_id or 0  # type: ignore[attr-defined]
            stream = self.streams.pop(stream_id, None)
            if stream is not None:
                stream.finish()
                self.waiters.stream_gone(stream_id)  # answered before its body was all sent
                self._stream_closed()
        elif kind is h2.events.StreamReset:
            self._on_reset(event)  # type: ignore[arg-type]
        elif kind is h2.events.ConnectionTerminated:
            self._on_goaway(event)  # type: ignore[arg-type]
        elif kind is h2.events.WindowUpdated:
            stream_id = event.stream_id or 0  # type: ignore[attr-defined]
            if stream_id:
                self.waiters.stream_window_opened(stream_id)
            else:
                self.waiters.connection_window_opened()
        elif kind is h2.events.RemoteSettingsChanged:
            self.settled = True
            self.waiters.wake_all()  # the stream limit or every stream's window may have changed

    def _on_headers(self, stream: _Stream, stream_id: int, headers: Headers) -> None:
        # An informational (1xx) block may come first; the final one replaces it.
        status, kept = 0, []
        for name, value in headers:
            if name == b":status":
                status = int(value) if len(value) == 3 and value.isdigit() else -1
            elif not name.startswith(b":"):
                kept.append((name, value))
        if status < 100:
            # Not an answer this client can read (`:status: abc`): the stream is reset (PROTOCOL_ERROR) and
            # its request may have been acted on.
            shown = next((v for n, v in headers if n == b":status"), b"")[:20]
            self.forget(stream_id, code=h2.errors.ErrorCodes.PROTOCOL_ERROR)
            stream.fail("dropped", f"the peer answered stream {stream_id} with a malformed :status {shown!r}")
            return
        if status >= 200 or not stream.status:
            stream.status, stream.headers = status, kept

    def _on_data(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id or 0
        # Acknowledge at once, kept or not: the connection window is shared by every stream.
        self.h2.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        data = event.data or b""
        left = stream.cap - stream.size
        if len(data) > left:
            # The cap: keep what fits, stop the stream, and answer with what was kept.
            stream.chunks.append(data[:left])
            stream.size = stream.cap
            stream.truncated = True
            self.forget(stream_id)
            stream.finish()
            return
        stream.chunks.append(data)
        stream.size += len(data)

    def _on_reset(self, event: h2.events.StreamReset) -> None:
        stream_id = event.stream_id or 0
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        self.waiters.stream_gone(stream_id)
        code = event.error_code
        if code == _REFUSED:
            stream.fail("refused", f"the peer reset stream {event.stream_id} with REFUSED_STREAM (not processed)")
        else:
            name = getattr(code, "name", code)
            stream.fail("dropped", f"the peer reset stream {event.stream_id} ({name}) before a complete answer")
        self._stream_closed()

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        last = event.last_stream_id or 0
        code = getattr(event.error_code, "name", event.error_code)
        self.closed = True
        self.why_closed = f"the peer sent GOAWAY ({code}) with last stream id {last}"
        # Those above `last` were never processed. Those at or below it may still be answered, and
        # are read as usual until they end (then the connection closes) or the connection is lost
        # (then they are cut, each "may have arrived").
        for stream_id in [stream_id for stream_id in self.streams if stream_id > last]:
            why = f"{self.why_closed}, below this request's stream {stream_id} (not processed)"
            self.streams.pop(stream_id).fail("refused", why, incident=self.incident)
            self.waiters.stream_gone(stream_id)
        self.waiters.wake_all()  # no new stream here: those still to open one go to a new connection
        if not self.streams:
            self.close()

    def _lose(self, why: str, *, graceful: bool = False) -> None:
        """End every stream (`_Stream.cut`) and the transport. `graceful`: what h2 framed last (its GOAWAY)
        is written before the close; nothing the peer sends from now on is read."""
        if not self.closed:
            self.closed = True
            self.why_closed = why
        for stream in self.streams.values():
            stream.cut(why, self.incident)
        self.streams.clear()
        self.waiters.wake_all()
        self._shut()
        if self.transport is not None and not self.transport.is_closing():
            if graceful:
                self.transport.close()
            else:
                self.transport.abort()

    def _shut(self) -> None:
        """Read and write nothing more. Reading resumes if the backlog paused it: a TLS transport does not
        flush what is left to write (a GOAWAY) nor finish its close while its reading is paused."""
        self.shut = True
        self._backlog = b""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._paused and self.transport is not None and not self.transport.is_closing():
            self._paused = False
            self.transport.resume_reading()

    def _stream_closed(self) -> None:
        if not self.streams:
            self.idle_since = time.monotonic()
            if self.closed:
                self.close()  # sent away (GOAWAY) and the last stream it still owed has ended
        self.waiters.slot_freed()

    # --- used by the client ---------------------------------------------------------------------------

    def usable(self, now: float) -> bool:
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return False
        if not self.streams and now - self.idle_since >= KEEPALIVE_SECONDS:
            self.close()  # quiet too long: a middlebox or the peer may have dropped it without a word
            return False
        return True

    def has_slot(self) -> bool:
        if not self.settled:
            return not self.streams  # one stream until the peer says how many it takes (as httpcore does)
        limit = self.h2.remote_settings.max_concurrent_streams
        # Fewer streams held at all (open, of either side, or closed and not yet pruned) than the
        # limit: fewer open ones too, without counting them (send_headers counts once more anyway).
        return len(self.h2.streams) < limit or self.h2.open_outbound_streams < limit

    def flush(self) -> bool:
        """Hand what h2 framed to the transport; False when the transport is gone (the bytes never leave).

        asyncio's `write()` on a closing transport drops the bytes without a word, so a request may be
        called sent only when this returned True."""
        out = self.h2.data_to_send()
        if self.transport is None or self.shut or self.transport.is_closing():
            return False
        if out:
            self.transport.write(out)
        return True

    def hand_over(self, stream: "_Stream", progress: Any) -> None:
        """Flush, and the first time the stream's HEADERS go to an open transport, call it sent.

        Raises `H2Failure("unreachable")` when the transport closed before the HEADERS were handed over."""
        if self.flush():
            if not stream.sent:
                stream.sent = True
                progress.mark_sent()
        elif not stream.sent:
            why = self.why_closed or "the connection closed"
            raise H2Failure("unreachable", f"{why} before the request was written", incident=self.incident)

    def forget(self, stream_id: int, code: h2.errors.ErrorCodes = _CANCEL) -> None:
        """Give a stream up: reset it (CANCEL) so the peer stops, and drop its state so nothing late binds."""
        if self.streams.pop(stream_id, None) is None:
            return
        self.waiters.stream_gone(stream_id)
        # The peer may well answer the reset with frames of its own on that stream: allow for them.
        self.h2.waste = max(0, self.h2.waste - 2)
        if not self.closed:
            try:
                self.h2.reset_stream(stream_id, error_code=code)
            except h2.exceptions.H2Error:
                pass  # already closed on the peer's side
            self.flush()
        self._stream_closed()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.why_closed = "closed by this client"
            try:
                self.h2.close_connection()
                self.flush()
            except h2.exceptions.H2Error:
                pass
        self.waiters.wake_all()  # no new stream here: those still to open one go to a new connection
        self._shut()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class H2Client:
    """HTTP/2 over TLS to any origin, many streams on each connection.

    `resolve` (host, port) -> addresses to dial, in order; the default dials the host name itself.
    Web Push passes the destination policy's resolver here, so only checked addresses are dialled.
    `streams`: how many requests the caller keeps in flight at most (its window); more connections
    to one origin are opened only when its peer's stream limit is below that.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool | str = True,
        connect_timeout: float = 10.0,
        resolve: Callable[[str, int], Any] | None = None,
        volatile: frozenset[bytes] = frozenset(),
        streams: int = 1,
    ) -> None:
        self._verify = verify
        self._streams = max(1, streams)
        self._ssl: ssl.SSLContext | None = None
        self._connect_timeout = connect_timeout  # also the request deadline the backend uses
        self._resolve = resolve
        self._connections: dict[tuple[str, int], list[_Connection]] = {}  # per origin, oldest first
        self._connecting: dict[tuple[str, int], asyncio.Task[_Connection]] = {}
        self._no_extra_until: dict[tuple[str, int], float] = {}  # origin -> after a failed extra connect
        # Origins that answered TLS without h2: a caller with an HTTP/1.1 client sends there instead.
        self.http1_origins: set[tuple[str, int]] = set()
        self.fallback: Any = None  # that client (an httpx.AsyncClient), if the caller has one
        self.traced = True  # capped_request may believe what this client reports as sent
        # Fields whose value changes on every request: kept out of the HPACK dynamic table, where they
        # would only evict the fields that repeat (the token, the topic) and lengthen every search.
        # `:path` is volatile where it names the device (APNs, Web Push); FCM's is the same every time.
        self._volatile = frozenset({b"content-length", *volatile})
        self._checked: set[tuple[bytes, bytes]] = set()  # fields `check_headers` passed (most repeat)
        self._split: dict[str, tuple[str, int, bytes, bytes]] = {}  # URL -> `_split(url)`, for URLs it accepted

    async def exchange(
        self,
        method: str,
        url: str,
        headers: Headers,
        content: bytes,
        *,
        cap: int,
        progress: Any,
        deadline_at: float | None = None,
    ) -> tuple[int, Headers, bytes, bool]:
        """One request on its own stream: (status, headers, body up to `cap`, whether it was cut).

        Raises `H2Failure`; cancelling (the caller's deadline) gives the stream up. `progress` hears
        `at(phase)` while nothing has left and `mark_sent()` once the HEADERS frame went to an open transport.
        `deadline_at` (monotonic): a stream is not opened once too little of it is left (`too_late`).
        """
        host, port, authority, path = self._parts(url)
        checked = self._checked
        for field in headers:
            if field not in checked:
                check_headers([field])
                if len(checked) >= _MEMO_FIELDS:
                    checked.clear()  # the volatile fields filled it: the repeating ones come back at once
                checked.add(field)
        fields = [(b":method", method.encode("ascii")), (b":scheme", b"https"), (b":authority", authority),
                  (b":path", path), *headers]  # fmt: skip
        if content or method in ("POST", "PUT", "PATCH"):
            fields.append((b"content-length", str(len(content)).encode("ascii")))
        volatile = self._volatile
        request = [hpack.NeverIndexedHeaderTuple(n, v) if n in volatile else (n, v) for n, v in fields]
        connection, stream_id = await self._open_stream((host, port), request, len(content), progress, deadline_at)
        stream = _Stream(asyncio.get_running_loop().create_future(), cap)
        connection.streams[stream_id] = stream
        try:
            if content:
                await _send_body(connection, stream_id, stream, content, progress)  # HEADERS go with the first DATA
            else:
                connection.hand_over(stream, progress)
            await stream.future
        except BaseException:
            connection.forget(stream_id)
            raise
        return stream.status, stream.headers, b"".join(stream.chunks), stream.truncated

    def speaks_http2(self, url: str) -> bool:
        """False once the URL's origin was found to offer no h2 (`NoHTTP2`)."""
        host, port, _, _ = self._parts(url)
        return (host, port) not in self.http1_origins

    def _parts(self, url: str) -> tuple[str, int, bytes, bytes]:
        """`_split(url)`, remembered: a backend sends to the same URLs again and again, and asks twice per
        request (`speaks_http2`, then `exchange`). A URL `_split` refuses raises each time, never kept."""
        parts = self._split.get(url)
        if parts is None:
            parts = _split(url)
            _remember(self._split, url, parts, _MEMO_URLS)
        return parts

    async def aclose(self) -> None:
        if self.fallback is not None:
            await self.fallback.aclose()
        for task in self._connecting.values():
            task.cancel()
        self._connecting.clear()
        for connections in self._connections.values():
            for connection in connections:
                connection.close()
        self._connections.clear()

    # --- connections ----------------------------------------------------------------------------------

    async def _open_stream(
        self, origin: tuple[str, int], request: list[Any], body_size: int, progress: Any, deadline_at: float | None
    ) -> tuple[_Connection, int]:
        """Frame the request's HEADERS on a new stream (not yet written): (connection, stream id).

        A stream is opened only once the connection window has room for its body (for its first
        full frame, if larger): the HEADERS then leave with the body, and a request that waits for
        room has sent nothing. A stream opened into a shut window would be sent and unfinished at
        once, and every answer's WINDOW_UPDATE would then go to bodies in pieces."""
        # The connection whose window room this sender was woken for: the turn is its to use there or
        # pass on to the next in that line. Sent elsewhere (another connection had the free slot) without
        # passing it, the senders behind it would sleep with nothing in flight to bring a WINDOW_UPDATE.
        held: _Connection | None = None
        try:
            while True:
                connection = held
                if connection is None or not connection.usable(time.monotonic()) or not connection.has_slot():
                    if held is not None:
                        _pass_turn(held)
                        held = None
                    connection = await self._stream_slot(origin, progress)
                h2c = connection.h2
                if body_size and h2c.outbound_flow_control_window < min(body_size, h2c.max_outbound_frame_size):
                    progress.at("waiting for room in the HTTP/2 connection window")
                    connection.waiters.slot_freed()  # the slot it found is not taken yet: the next sender may use it
                    first, held = held is connection, None  # woken and still short: it keeps the head of the line
                    await connection.waiters.window(-next(_pending), connection_shut=True, first=first)
                    held = connection
                    continue
                if deadline_at is not None and too_late(deadline_at, self._connect_timeout):
                    # A request sent now could only end unknown (its deadline runs out before any answer),
                    # and a retry would have to treat it as maybe delivered: keep it unsent instead. The
                    # slot it found goes to the next sender waiting for one.
                    connection.waiters.slot_freed()
                    raise TimeoutError("too little of the deadline was left to open a stream")
                try:
                    stream_id = h2c.get_next_available_stream_id()
                    h2c.send_headers(stream_id, request, end_stream=not body_size)
                except h2.exceptions.NoAvailableStreamIDError:
                    connection.close()  # out of stream ids: nothing left, so open a new connection and go on
                    continue
                except h2.exceptions.ProtocolError as exc:
                    # h2 refused to build the HEADERS frame (the connection closing): nothing left.
                    detail = f"the request could not be framed ({type(exc).__name__}: {exc})"
                    raise H2Failure("unreachable", detail) from exc
                held = None  # its body's sender passes the turn on once it has sent (`_send_body`)
                return connection, stream_id
        finally:
            if held is not None:
                _pass_turn(held)

    async def _stream_slot(self, origin: tuple[str, int], progress: Any) -> _Connection:
        """A connection to `origin` with room for one more stream: an open one (the oldest with a free
        slot, so that the others fall idle and close when the load ebbs), a new one (`_may_add`), or,
        when neither, the first slot to free on the open connection with the fewest senders waiting."""
        while True:
            now = time.monotonic()
            for connection in self._connections.get(origin, ()):
                if connection.usable(now) and connection.has_slot():
                    return connection
            connections = self._prune(origin, now)
            # A connect that has ended is not one to wait for (its callback may not have run yet), and
            # awaiting it would not yield: its connection is among `connections` already.
            connecting = self._connecting.get(origin)
            if (connecting is not None and not connecting.done()) or self._may_add(origin, connections, now):
                try:
                    connection = await self._connect(origin, progress)
                except H2Failure:
                    if not self._prune(origin, time.monotonic()):
                        raise  # no connection at all: the request fails unsent
                    # Another connection could not be opened: the open ones serve, their slots in turn.
                    self._no_extra_until[origin] = time.monotonic() + _RETRY_EXTRA_SECONDS
                    continue
                if connection.has_slot():
                    return connection
                continue
            progress.at("waiting for a free HTTP/2 stream")
            await _least_awaited(connections).waiters.slot()

    def _prune(self, origin: tuple[str, int], now: float) -> list[_Connection]:
        """The usable connections to `origin`, the others dropped (each ends its own streams)."""
        connections = [c for c in self._connections.get(origin, ()) if c.usable(now)]
        if connections:
            self._connections[origin] = connections
        else:
            self._connections.pop(origin, None)
        return connections

    def _may_add(self, origin: tuple[str, int], connections: list[_Connection], now: float) -> bool:
        """Whether to open a connection to `origin` beside `connections` (every one of them full)."""
        if not connections:
            return True
        if now < self._no_extra_until.get(origin, 0.0):
            return False
        limits = [c.h2.remote_settings.max_concurrent_streams for c in connections if c.settled]
        # Every peer limit known (a connection still waiting for its peer's SETTINGS may yet take more),
        # each a capacity rather than back-pressure, and together short of the caller's window.
        return len(limits) == len(connections) and min(limits) >= _POOL_MIN_STREAMS and sum(limits) < self._streams

    async def _connect(self, origin: tuple[str, int], progress: Any) -> _Connection:
        task = self._connecting.get(origin)
        if task is None or task.done():
            # Single flight: every sender waiting for this origin shares one connect.
            task = asyncio.ensure_future(self._open(origin, progress))
            self._connecting[origin] = task
            task.add_done_callback(lambda done: self._connect_ended(origin, done))
        else:
            progress.at("waiting for the connection to be ready")
        # shield: one sender's deadline must not cancel the connect the others wait for
        return await asyncio.shield(task)

    def _connect_ended(self, origin: tuple[str, int], task: "asyncio.Task[_Connection]") -> None:
        if self._connecting.get(origin) is task:  # a later connect may have taken its place already
            del self._connecting[origin]
        # Retrieved here: when every sender waiting for it gave up first (their deadlines), a failed connect
        # would otherwise be logged as "Task exception was never retrieved" whenever the collector frees
        # it, from inside whatever code the process happens to be running then.
        if not task.cancelled():
            task.exception()

    async def _open(self, origin: tuple[str, int], progress: Any) -> _Connection:
        host, port = origin
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                addresses = [host] if self._resolve is None else [str(a) for a in await self._resolve(host, port)]
                progress.at("connecting")
                transport, connection = await _dial(loop, addresses, port, where=f"{host}:{port}")
                progress.at("in the TLS handshake")
                tls = await loop.start_tls(transport, connection, self._context(), server_hostname=host)
        except Exception as exc:  # noqa: BLE001 - the resolver's refusal too: all of it is "nothing was sent"
            # Every sender waiting on this connect gets this failure: one attempt, one incident.
            incident = f"h2 connect {next(_serials)}"
            raise H2Failure("unreachable", f"{type(exc).__name__}: {exc}", incident=incident) from exc
        assert tls is not None
        connection.connection_made(tls)
        alpn = tls.get_extra_info("ssl_object").selected_alpn_protocol()
        if alpn != "h2":
            tls.close()
            self.http1_origins.add(origin)
            raise NoHTTP2(f"the peer does not speak HTTP/2 (ALPN {alpn or 'none'})")
        progress.at("opening the HTTP/2 connection")
        connection.h2.local_settings.update({h2.settings.SettingCodes.ENABLE_PUSH: 0})
        connection.h2.initiate_connection()
        connection.h2.increment_flow_control_window(_READ_WINDOW)
        connection.flush()
        connection.idle_since = time.monotonic()
        connection._watch_idle()
        self._connections[origin] = [*self._prune(origin, time.monotonic()), connection]
        return connection

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            # The same trust store (certifi, or SSL_CERT_FILE) the rest of the project uses, loaded once
            # per process; a context of the caller's own gets the ALPN setting here.
            from notifications.backends.tls import client_context

            verify = self._verify
            if isinstance(verify, ssl.SSLContext):
                verify.set_alpn_protocols(["h2"])
            self._ssl = client_context(verify, use="h2")
        return self._ssl


def _remember(memo: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Keep `value` under `key`; a full memo is emptied first. What fills one is mostly keys that do not
    come back (a date that moved on, a field never indexed), and what does come back is kept again at once."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value


def _pass_turn(connection: _Connection) -> None:
    """Hand the room in `connection`'s window to the next sender waiting for it, if any is left."""
    if not connection.closed and connection.h2.outbound_flow_control_window > 0:
        connection.waiters.connection_window_opened()


def _least_awaited(connections: list[_Connection]) -> _Connection:
    """The connection a sender with no free slot anywhere waits on: one still waiting for its peer's
    SETTINGS (they may open many slots at once, and wake every sender waiting there), else the one with
    the fewest senders in line, so that the lines stay even across connections."""
    for connection in connections:
        if not connection.settled:
            return connection
    return min(connections, key=lambda c: c.waiters.waiting_for_slot)


def check_headers(headers: Headers) -> None:
    """Raise ValueError (nothing is sent) for a header h2 or the peer would refuse as malformed."""
    for name, value in headers:
        if not _NAME.fullmatch(name) or not _VALUE.fullmatch(value) or name in (b"connection", b"te", b"host"):
            raise ValueError(f"the request header {name[:40]!r} is not valid in HTTP/2")


def too_late(deadline_at: float, timeout: float) -> bool:
    """Whether less than a tenth of `timeout` (at least 50 ms) is left before `deadline_at`."""
    return deadline_at - time.monotonic() < max(0.05, timeout / 10)


async def _dial(
    loop: asyncio.AbstractEventLoop, addresses: list[str], port: int, *, where: str = ""
) -> tuple[Any, _Connection]:
    error: Exception | None = None
    for address in addresses:
        connection = _Connection(where)
        try:
            transport, _ = await loop.create_connection(lambda c=connection: c, address, port)  # type: ignore[misc]
        except OSError as exc:
            error = exc
            continue
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return transport, connection
    raise OSError(f"no address accepted a connection ({error})")


async def _send_body(connection: _Connection, stream_id: int, stream: _Stream, content: bytes, progress: Any) -> None:
    """Send `content` on the stream within the peer's windows and frame size, waiting for WINDOW_UPDATE."""
    h2c = connection.h2
    view = memoryview(content)
    try:
        while view:
            if connection.closed or stream_id not in connection.streams:
                return  # the stream ended (answered early, reset, or the connection went): its future says how
            sendable = min(h2c.local_flow_control_window(stream_id), h2c.max_outbound_frame_size, len(view))
            if sendable <= 0:
                connection.hand_over(stream, progress)  # the HEADERS (and what DATA fit) leave while the window is shut
                shut = h2c.outbound_flow_control_window <= 0
                if not shut:
                    connection.waiters.connection_window_opened()  # only this stream's window is shut
                await connection.waiters.window(stream_id, connection_shut=shut)
                continue
            h2c.send_data(stream_id, bytes(view[:sendable]), end_stream=sendable == len(view))
            view = view[sendable:]
            connection.hand_over(stream, progress)
    finally:
        # What this sender leaves of the connection window goes to the next sender waiting for it.
        if not connection.closed and h2c.outbound_flow_control_window > 0:
            connection.waiters.connection_window_opened()


def _split(url: str) -> tuple[str, int, bytes, bytes]:
    """(host, port, :authority, :path) of an https:// URL; ValueError for anything else."""
    if not url.startswith("https://"):
        raise ValueError("the lean HTTP/2 client speaks https:// only")
    rest = url[8:]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:] or "/"
    if path.startswith("?"):
        path = "/" + path
    if not authority or "@" in authority or any(c in url for c in " \r\n\t#\\"):
        raise ValueError("the URL must be a plain https://host[:port]/path")
    if authority.startswith("["):
        host, _, tail = authority[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = authority.partition(":")
    port = int(port_text) if port_text else 443
    if not host or not 0 < port < 65536:
        raise ValueError("the URL's host or port is not valid")
    return host, port, authority.encode("ascii"), path.encode("ascii")

"""Connection-level faults for the HTTP/2 fakes: what Hypercorn (a well-behaved server) never does.

Every HTTP/2 fake (`HypercornFake`) listens through a front door. With no wire fault configured, the
front door splices each connection through to Hypercorn untouched. With `Faults.wire` set, new
connections are served here instead, by a small HTTP/2 server on the `h2` state machine that can
misbehave at the frame level:

- "stall_tls": accept TCP, never answer the TLS handshake (nothing can be sent);
- "refuse_streams": reset every stream with REFUSED_STREAM (RFC 9113: not processed);
- "goaway": process `goaway_after` streams, then send GOAWAY with the last processed stream id and
  process nothing above it (0: refuse everything);
- "goaway_graceful": the same GOAWAY, but said as soon as the last stream it names arrives, before any
  stream is answered; the streams at or below it are answered afterwards, as RFC 9113 lets them
  complete and providers rotating a connection do;
- "max_streams_1": answer the first stream, lowering SETTINGS_MAX_CONCURRENT_STREAMS to 1 as it
  does; from then on serve one stream at a time, each delivered and then left unanswered for
  `hang_seconds`, and refuse (REFUSED_STREAM) any stream over the limit;
- "reset_after": deliver, then reset the stream (INTERNAL_ERROR) instead of answering;
- "reset_before": reset the stream (INTERNAL_ERROR) without delivering;
- "drop_before": close the connection as soon as a request is complete, without delivering;
- "hang_before": never deliver and never answer (until `hang_seconds`, then close);
- "tiny_window": announce a stream flow-control window of 16 bytes (SETTINGS_INITIAL_WINDOW_SIZE),
  so a request body must go out a few bytes at a time, each after a WINDOW_UPDATE;
- "shut_window": never send a WINDOW_UPDATE, so the connection window (64 KiB) closes for good once
  that much body has arrived: later requests cannot go out whole;
- "stray_stream": deliver each request, then answer it on a stream the client never opened (a raw
  HEADERS frame on the next, even, stream id: a push stream never promised), never on its own;
- "stream_limit": no fault, only a SETTINGS_MAX_CONCURRENT_STREAMS of `stream_limit` per connection
  from its first SETTINGS frame (FCM's front ends announce 100); a stream over it is refused;
- "flood_ping", "flood_priority", "flood_settings", "flood_window_update", "flood_unknown",
  "flood_rst_ended", "flood_data_ended": answer the first request, then flood the connection (with no
  stream open) with frames that carry no answer: PINGs, PRIORITY frames, empty SETTINGS, 1-byte
  WINDOW_UPDATEs, frames of an unknown type, or RST_STREAM or empty DATA on the stream that just
  ended; until the client closes the connection (or `FLOOD_MAX_FRAMES` are written);
- "flood_ping_held": hold the first request unanswered and flood PINGs;
- "flood_empty_data": start the first request's answer (HEADERS, no end) and flood empty DATA frames
  on it;
- "bad_status": answer every request with `:status: abc`.

Streams that get past the fault are answered by the fake's own handler, so deliveries are recorded
as usual. `WireLog` counts what arrived, so a test can tell "sent" from "never left".
"""

import asyncio
import ssl
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from notifications.testing.asgi_fake import Request, Response

FLOODS = frozenset({"flood_ping", "flood_priority", "flood_settings", "flood_window_update", "flood_unknown",
                    "flood_rst_ended", "flood_data_ended", "flood_ping_held", "flood_empty_data"})  # fmt: skip
WIRE_MODES = frozenset({"", "stall_tls", "refuse_streams", "goaway", "goaway_graceful", "max_streams_1", "reset_after",
                        "reset_before", "drop_before", "hang_before", "tiny_window", "shut_window",
                        "stray_stream", "stream_limit", "bad_status", *FLOODS})  # fmt: skip
FLOOD_MAX_FRAMES = 200_000  # a flood stops here if the client never closes the connection
_FLOOD_BATCH = 256  # frames per write


@dataclass
class WireSettings:
    """The knobs of a wire fault, copied from the fake's `Faults` when a connection starts."""

    mode: str
    goaway_after: int = 1
    hang_seconds: float = 5.0
    stream_limit: int = 100


@dataclass
class WireLog:
    """What the hostile front door saw, across connections (read by tests through the fake's stats)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    connections: int = 0
    tls_stalled: int = 0
    streams: int = 0  # requests whose HEADERS arrived
    refused: int = 0  # of those, reset with REFUSED_STREAM or left above a GOAWAY (never processed)
    handled: int = 0  # of those, handed to the fake's request handler (which counts them as requests too)
    paths: list[str] = field(default_factory=list)  # :path of every stream that arrived and was not refused
    in_flight: int = 0  # processed streams not yet answered, across connections
    peak_in_flight: int = 0
    flood_frames: int = 0  # frames a flood wrote (some may still be in the socket buffers when it stops)
    floods_ended: int = 0  # floods that stopped because the client closed the connection
    goaway_codes: list[int] = field(default_factory=list)  # error codes of the client's GOAWAYs during a flood

    def count(self, **deltas: int) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "connections": self.connections,
                "tls_stalled": self.tls_stalled,
                "streams": self.streams,
                "refused": self.refused,
                "handled": self.handled,
                "paths": list(self.paths),
                "peak_in_flight": self.peak_in_flight,
                "flood_frames": self.flood_frames,
                "floods_ended": self.floods_ended,
                "goaway_codes": list(self.goaway_codes),
            }

    def clear(self) -> None:
        with self.lock:
            self.connections = self.tls_stalled = self.streams = self.refused = self.handled = 0
            self.in_flight = self.peak_in_flight = self.flood_frames = self.floods_ended = 0
            self.paths = []
            self.goaway_codes = []


Handler = Callable[[Request], Awaitable[Response]]


class _Stream:
    __slots__ = ("headers", "body")

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers
        self.body = bytearray()


class HostileH2:
    """One connection served with a wire fault. `serve()` returns when the connection is done."""

    def __init__(
        self,
        settings: WireSettings,
        handler: Handler,
        log: WireLog,
        tls: ssl.SSLContext | None,
        stopping: asyncio.Event,
    ) -> None:
        self.settings = settings
        self.handler = handler
        self.log = log
        self.tls = tls
        self.stopping = stopping
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.streams: dict[int, _Stream] = {}
        self.processed = 0
        self.last_processed = 0
        self.goaway_sent = False  # decided: no stream above `last_processed` is processed from now on
        self.goaway_said = False  # the GOAWAY frame itself is written
        self.unhandled: set[int] = set()  # processed streams whose handler has not returned yet
        self.busy = False  # max_streams_1: a stream is being served
        self.tasks: set[asyncio.Task[None]] = set()
        self.writer: asyncio.StreamWriter | None = None
        self.closing = False
        self.flooding = False  # a flood started: what the client sends is only scanned for its GOAWAY
        self.scanned = b""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.log.count(connections=1)
        self.writer = writer
        try:
            if self.settings.mode == "stall_tls":
                self.log.count(tls_stalled=1)
                await self._until_closed(reader)  # the ClientHello is read and never answered
                return
            if self.tls is not None:
                await writer.start_tls(self.tls)
            if self.settings.mode == "stream_limit":
                # In the first SETTINGS frame, as a server announces its capacity (not a later change).
                self.h2.local_settings = h2.settings.Settings(
                    client=False,
                    initial_values={
                        h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.settings.stream_limit,
                        h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.h2.DEFAULT_MAX_HEADER_LIST_SIZE,
                    },
                )
            self.h2.initiate_connection()
            if self.settings.mode == "tiny_window":
                self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16})
            self._flush()
            while not self.closing and (data := await reader.read(65536)):
                if self.flooding:
                    self._scan(data)
                    continue
                if self.goaway_said:
                    continue  # a graceful server lets the client read its GOAWAY: frames after it are dropped
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError:
                    break
                for event in events:
                    self._on(event)
                self._flush()
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            for task in self.tasks:
                task.cancel()
            writer.close()

    async def _until_closed(self, reader: asyncio.StreamReader) -> None:
        reading = asyncio.ensure_future(reader.read(65536))
        stopping = asyncio.ensure_future(self.stopping.wait())
        try:
            while True:
                done, _ = await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if stopping in done or not reading.result():
                    return
                reading = asyncio.ensure_future(reader.read(65536))
        finally:
            reading.cancel()
            stopping.cancel()

    def _flush(self) -> None:
        if self.writer is not None and (out := self.h2.data_to_send()):
            self.writer.write(out)

    # --- frames in ---------------------------------------------------------------------------------

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            headers = {bytes(k).decode("latin-1"): bytes(v).decode("latin-1") for k, v in event.headers or []}
            self.streams[event.stream_id] = _Stream(headers)
            self.log.count(streams=1)
            self._on_headers(event.stream_id)
        elif isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.body += event.data or b""
            if self.settings.mode != "shut_window":
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            if event.stream_id in self.streams:
                self._on_request(event.stream_id)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closing = True

    def _refuse(self, stream_id: int) -> None:
        self.streams.pop(stream_id, None)
        self.log.count(refused=1)
        if not self.goaway_sent:  # after a GOAWAY, streams above its last id are simply never processed
            self.h2.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)

    def _on_headers(self, stream_id: int) -> None:
        mode = self.settings.mode
        if mode == "refuse_streams" or (self.goaway_sent and stream_id > self.last_processed):
            self._refuse(stream_id)
        elif mode == "goaway" and self.processed >= self.settings.goaway_after:
            self.goaway_sent = True
            self._refuse(stream_id)
            self._spawn(self._goaway())
        elif mode == "max_streams_1" and self.busy:
            self._refuse(stream_id)  # over the announced limit of one stream at a time
        elif mode == "stream_limit" and len(self.unhandled) >= self.settings.stream_limit:
            self._refuse(stream_id)  # over the announced limit: a client that kept to it never sees this
        else:
            with self.log.lock:
                self.log.paths.append(self.streams[stream_id].headers.get(":path", ""))
                self.log.in_flight += 1
                self.log.peak_in_flight = max(self.log.peak_in_flight, self.log.in_flight)
            self.processed += 1
            self.last_processed = stream_id
            self.unhandled.add(stream_id)
            if mode == "goaway_graceful" and self.processed == self.settings.goaway_after:
                self.goaway_sent = True
                self._graceful_goaway(stream_id)
            if mode == "max_streams_1" and self.processed == 1:
                self._lower_max_streams()  # before the first answer: the client learns it while reading it
            elif mode == "max_streams_1":
                self.busy = True

    def _stray_answer(self, stream_id: int, status: int | bytes) -> None:
        """A HEADERS frame ending `stream_id`, written raw: h2 would refuse to send on a stream not opened.

        The block is encoded without touching any HPACK table (never-indexed literals), so the
        connection's own compression state stays in step."""
        import hpack
        import hyperframe.frame

        value = status if isinstance(status, bytes) else str(status).encode()
        block = hpack.Encoder().encode([hpack.NeverIndexedHeaderTuple(b":status", value)])
        frame = hyperframe.frame.HeadersFrame(stream_id, data=block, flags=["END_HEADERS", "END_STREAM"])
        self._flush()
        if self.writer is not None:
            self.writer.write(frame.serialize())

    def _graceful_goaway(self, last_stream_id: int) -> None:
        """GOAWAY (NO_ERROR, `last_stream_id`), written as a raw frame.

        Through h2, the fake's own state machine would close at once and could not answer the streams
        the GOAWAY lets finish; a provider's server can, which is the case under test."""
        import hyperframe.frame

        self._flush()
        if self.writer is not None:
            frame = hyperframe.frame.GoAwayFrame(0, last_stream_id=last_stream_id, error_code=0)
            self.writer.write(frame.serialize())

    def _lower_max_streams(self) -> None:
        """Announce SETTINGS_MAX_CONCURRENT_STREAMS = 1, written as a raw frame.

        Through h2's own settings, h2 would enforce the new limit once acknowledged and fail the whole
        connection when a client's stream crosses it in flight; a server refuses such a stream instead
        (REFUSED_STREAM, in `_on_headers`), which is the case under test.
        """
        self._flush()
        if self.writer is not None:
            payload = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS.to_bytes(2, "big") + (1).to_bytes(4, "big")
            self.writer.write(len(payload).to_bytes(3, "big") + b"\x04\x00" + (0).to_bytes(4, "big") + payload)

    def _on_request(self, stream_id: int) -> None:
        mode = self.settings.mode
        if mode in FLOODS:
            self._spawn(self._flood(stream_id))
            return
        if mode == "drop_before":
            self.closing = True
            return
        if mode == "reset_before":
            self.streams.pop(stream_id, None)
            self.h2.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR)
            return
        if mode == "hang_before":
            self._spawn(self._hang_then_close())
            return
        self._spawn(self._answer(stream_id))

    # --- floods -------------------------------------------------------------------------------------

    async def _flood(self, stream_id: int) -> None:
        """Answer (or hold, or start answering) the first request as the mode says, then flood; later
        requests are answered as usual, unless the mode holds them."""
        mode = self.settings.mode
        if self.flooding:
            if mode not in ("flood_ping_held", "flood_empty_data"):
                await self._answer(stream_id)
            return
        if mode == "flood_empty_data":
            self.h2.send_headers(stream_id, [(":status", "200")], end_stream=False)
            self._flush()
        elif mode != "flood_ping_held":
            await self._answer(stream_id)
        frame = _flood_frame(mode, stream_id)
        self.flooding = True
        writer = self.writer
        assert writer is not None
        written = 0
        try:
            while not self.closing and not writer.is_closing() and written < FLOOD_MAX_FRAMES:
                writer.write(frame * _FLOOD_BATCH)
                written += _FLOOD_BATCH
                self.log.count(flood_frames=_FLOOD_BATCH)
                await writer.drain()
                # drain() does not yield below the high-water mark, and a bare sleep(0) starved the
                # reader of this loop: a short pause per batch lets it see the GOAWAY.
                await asyncio.sleep(0.001)
        except (OSError, ssl.SSLError):
            pass
        finally:
            if written < FLOOD_MAX_FRAMES:
                self.log.count(floods_ended=1)  # the client closed the connection (or the fake is stopping)

    def _scan(self, data: bytes) -> None:
        """Read the client's frames during a flood only for a GOAWAY (h2's state is left behind by the
        raw frames), and stop serving once it came."""
        buffer = self.scanned + data
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                break
            if buffer[3] == 0x1:  # HEADERS: a request that reached the peer (held, like the first)
                self.log.count(streams=1)
            if buffer[3] == 0x7 and length >= 8:  # GOAWAY: last stream id, then the error code
                with self.log.lock:
                    self.log.goaway_codes.append(int.from_bytes(buffer[13:17], "big"))
                self.closing = True
            buffer = buffer[9 + length :]
        self.scanned = buffer

    # --- answers out ----------------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _goaway(self) -> None:
        """Say GOAWAY once every stream it calls processed has been handled (up to a bound).

        A stream at or below the last id may have been acted on, and the client may say `unknown` of
        it; waiting first means the fake's record holds every such stream by the time the client can
        give up on the connection, so a test can check `unknown` against what really arrived."""
        for _ in range(400):
            if not self.unhandled:
                break
            await asyncio.sleep(0.005)
        self.goaway_said = True
        self.h2.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR, last_stream_id=self.last_processed)
        self._flush()

    async def _hang_then_close(self) -> None:
        await asyncio.sleep(self.settings.hang_seconds)
        if self.writer is not None:
            self.writer.close()

    async def _answer(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id)
        headers = stream.headers
        request = Request(
            method=headers.get(":method", ""),
            path=headers.get(":path", "").split("?", 1)[0],
            query=headers.get(":path", "").partition("?")[2],
            headers={k.lower(): v for k, v in headers.items() if not k.startswith(":")},
            body=bytes(stream.body),
            http_version="2",
            client=f"hostile:{id(self)}",
        )
        self.log.count(handled=1)
        try:
            response = await self.handler(request)
        finally:
            self.unhandled.discard(stream_id)
            self.log.count(in_flight=-1)
        if self.settings.mode == "stray_stream":
            # An even id: a server-initiated stream never promised (push is off), so no request's stream.
            self._stray_answer(stream_id + 1, response.status)
            return
        if self.settings.mode == "bad_status":
            self._stray_answer(stream_id, b"abc")  # on its own stream, a status no client can read
            return
        if self.settings.mode == "reset_after":
            self.h2.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR)
            self._flush()
            return
        if self.settings.mode == "max_streams_1" and self.busy:
            await asyncio.sleep(self.settings.hang_seconds)
            self.busy = False
        try:
            fields = [(":status", str(response.status)), *((k.lower(), v) for k, v in response.headers.items())]
            fields.append(("content-length", str(len(response.body))))
            self.h2.send_headers(stream_id, fields, end_stream=not response.body)
            if response.body:
                # Fake answers are small: they fit the client's initial window.
                self.h2.send_data(stream_id, response.body, end_stream=True)
        except (h2.exceptions.ProtocolError, h2.exceptions.FlowControlError, h2.exceptions.StreamClosedError):
            return  # the client reset or left the stream meanwhile, or the connection is going away
        self._flush()


def _flood_frame(mode: str, stream_id: int) -> bytes:
    """One frame of the flood `mode` sends, serialized; `stream_id` is the first request's stream."""
    import hyperframe.frame as frames

    if mode == "flood_priority":
        return frames.PriorityFrame(stream_id, depends_on=0, stream_weight=15).serialize()
    if mode == "flood_settings":
        return frames.SettingsFrame(0).serialize()
    if mode == "flood_window_update":
        return frames.WindowUpdateFrame(0, window_increment=1).serialize()
    if mode == "flood_rst_ended":
        return frames.RstStreamFrame(stream_id, error_code=0).serialize()
    if mode in ("flood_empty_data", "flood_data_ended"):
        return frames.DataFrame(stream_id, data=b"").serialize()
    if mode == "flood_unknown":
        return (8).to_bytes(3, "big") + bytes([0xFA, 0]) + (0).to_bytes(4, "big") + b"\x00" * 8
    return frames.PingFrame(0, opaque_data=b"\x00" * 8).serialize()  # flood_ping, flood_ping_held

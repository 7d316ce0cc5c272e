"""What the HTTP/2 push fakes share: a Hypercorn server on its own thread, and a tiny request/response layer.

The FCM, APNs and Web Push fakes are plain ASGI apps served by Hypercorn over TLS (a test CA from
`notifications.testing.keys`), so clients negotiate HTTP/2 with ALPN exactly as they would against
Google, Apple or a browser vendor. Port 0 picks a free port: the socket is bound here, so the port
is known before the server starts.

The public socket is a front door (see `notifications.testing.wire_faults`): each connection is
spliced through to Hypercorn on a private socket, unless a wire fault is configured, in which case a
deliberately hostile HTTP/2 server takes the connection instead.
"""

import asyncio
import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from hypercorn.asyncio import serve
from hypercorn.config import Config

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

MAX_BODY = 1 << 20  # a fake never buffers more than this from one request


@dataclass
class Request:
    """One HTTP request as the fakes need it: method, path, lower-cased headers, body, HTTP version."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    http_version: str
    client: str = ""  # host:port of the peer: one value per connection

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    huge: int = 0  # instead of `body`: this many bytes of filler, streamed
    trickle: float = 0.0  # send `body` one byte per this many seconds

    @classmethod
    def json(cls, status: int, value: Any, headers: dict[str, str] | None = None) -> "Response":
        return cls(status, json.dumps(value).encode(), {"content-type": "application/json", **(headers or {})})


# What a fake plugs into its front door to serve connections under a wire fault itself.
HostileDoor = Callable[
    [asyncio.StreamReader, asyncio.StreamWriter, ssl.SSLContext | None, asyncio.Event], Awaitable[bool]
]

# ASGI gives an app no way to reset a stream, so the fakes model "no answer" by hanging past the
# client's timeout (the client's outcome is `unknown` either way).
Handler = Callable[[Request], Awaitable[Response]]


class AsgiApp:
    """An ASGI app around one async handler: reads the whole body (bounded), writes one answer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        if body is None:
            return
        request = Request(
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
            body=body,
            http_version=scope.get("http_version", "1.1"),
            client=":".join(str(part) for part in (scope.get("client") or ("", 0))),
        )
        response = await self.handler(request)
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
        headers.append((b"content-length", str(response.huge or len(response.body)).encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        if response.huge or response.trickle:
            await _stream(response, send)
        else:
            await send({"type": "http.response.body", "body": response.body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, kept up to MAX_BODY bytes (the rest read and dropped); None if the client left."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= MAX_BODY:
            chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _stream(response: Response, send: Send) -> None:
    """A huge body in 64 KiB pieces, or a body one byte at a time; stop when the client has gone."""
    if response.huge:
        pieces = [b"x" * min(65536, response.huge - at) for at in range(0, response.huge, 65536)]
    else:
        pieces = [response.body[i : i + 1] for i in range(len(response.body))]
    try:
        for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            if response.trickle:
                await asyncio.sleep(response.trickle)
        await send({"type": "http.response.body", "body": b""})
    except Exception:  # noqa: BLE001  the client reset the stream or closed the connection: nothing to finish
        return


class HypercornFake:
    """Serve an ASGI app with Hypercorn on a daemon thread (or in the foreground), TLS when given a certificate."""

    thread_name = "fake-h2"

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        certfile: Path | str | None = None,
        keyfile: Path | str | None = None,
        alpn: tuple[str, ...] = ("h2", "http/1.1"),
        max_streams: int = 1000,
    ) -> None:
        self._sock = _listening(host, port)
        # Hypercorn's own socket, reached only through the front door.
        self._private = _listening(host, 0)
        self._private_port = self._private.getsockname()[1]
        self.host = host
        self.port = self._sock.getsockname()[1]
        self.tls = certfile is not None
        self.certfile, self.keyfile = certfile, keyfile
        # Set by the fake: takes a new connection when a wire fault is configured (returns True), else
        # leaves it to be spliced through to Hypercorn. Arguments: reader, writer, TLS context, stop event.
        self.hostile: HostileDoor | None = None
        # Spliced connections and when bytes last crossed each (loop time), so a test or the chaos run can
        # recycle the quiet ones, as a provider's load balancer does, and make clients open new ones.
        self._spliced: dict[asyncio.StreamWriter, float] = {}
        config = Config()
        # Hypercorn takes ownership of (and closes) the descriptor it is given: hand it a duplicate, so
        # ours stays ours to close and a closed number is never closed twice.
        config.bind = [f"fd://{os.dup(self._private.fileno())}"]
        if certfile is not None:
            config.certfile = str(certfile)
            config.keyfile = str(keyfile)
        config.alpn_protocols = list(alpn)
        config.accesslog = None
        config.errorlog = logging.getLogger("weave.fakes.hypercorn")
        config.graceful_timeout = 0.5
        config.keep_alive_timeout = 30
        # Real APNs allows ~1,000 concurrent streams per connection; a wide window lets one connection
        # carry a whole batch's concurrency. FCM's front ends allow 100 (`max_streams` says so).
        config.h2_max_concurrent_streams = max_streams
        # Hypercorn ends a connection after 1,000 requests by default, with a GOAWAY after which its
        # h2 state machine can no longer answer the streams in flight, so about a window's worth of
        # requests it did act on are never answered. No provider does that (their GOAWAY lets the
        # streams below its last id finish), and it made every long run lose answers at each
        # thousandth request. The GOAWAY behaviours under test are the wire faults' ("goaway", "goaway_graceful").
        config.keep_alive_max_requests = 2**62
        self._config = config
        self._app = app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        front = await asyncio.start_server(self._front, sock=self._sock, backlog=256)
        self._ready.set()
        try:
            await serve(self._app, self._config, shutdown_trigger=self._stopping.wait, mode="asgi")
        finally:
            front.close()

    async def _front(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Splice a connection through to Hypercorn, or serve it with the configured wire fault."""
        if self.hostile is not None:
            assert self._stopping is not None
            if await self.hostile(reader, writer, self._tls_context(), self._stopping):
                return
        try:
            inner_reader, inner_writer = await asyncio.open_connection(self.host, self._private_port)
        except OSError:
            writer.close()
            return
        loop = asyncio.get_running_loop()
        self._spliced[writer] = loop.time()

        def touch() -> None:
            self._spliced[writer] = loop.time()

        try:
            await asyncio.gather(_pipe(reader, inner_writer, touch), _pipe(inner_reader, writer, touch))
        finally:
            self._spliced.pop(writer, None)
            writer.close()
            inner_writer.close()

    def close_quiet_connections(self, idle: float = 0.5) -> None:
        """Close spliced connections nothing crossed for `idle` seconds (from any thread; returns at once).

        Clients then open new connections, which meet a wire fault set since. Busy connections are left
        alone, so no request in flight is cut."""
        loop = self._loop
        if loop is None:
            return

        def close() -> None:
            now = loop.time()
            for writer, last in list(self._spliced.items()):
                if now - last >= idle:
                    writer.close()

        loop.call_soon_threadsafe(close)

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.certfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.certfile), str(self.keyfile))
        context.set_alpn_protocols(["h2"])
        return context

    def serve_forever(self) -> None:
        asyncio.run(self._main())

    def start(self) -> Self:
        """Serve on a daemon thread; return once the event loop runs (connections queue in the backlog meanwhile)."""
        self._thread = threading.Thread(target=self.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake server did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(5)
        self._sock.close()
        self._private.close()

    def serve_until_interrupted(self, banner: str, write: Callable[[str], Any]) -> None:
        write(banner)
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            pass

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _listening(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)
    return sock


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, touch: Callable[[], None] | None = None
) -> None:
    """Copy bytes one way until EOF, then pass the EOF on (a half-close stays a half-close)."""
    try:
        while data := await reader.read(65536):
            if touch is not None:
                touch()
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()  # one side broke: the other cannot carry on alone

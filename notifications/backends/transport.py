"""A lean HTTP/1.1 transport for `httpx.AsyncClient`: keep-alive connections on asyncio streams.

httpx's default async transport (httpcore over anyio) does work per request that a push worker does
not need (bench/results keeps the profiles): lock setup, a readability probe of every pooled socket,
and a pool scan per state change. A push backend needs far less: one
origin, keep-alive, a bound on open connections, and no surprises. This transport does that and no
more, with the strict framing of `notifications.backends.http11`. It serves httpx clients (request
building, `MockTransport` in tests) and, through `exchange()`, `capped_request()`'s hot path, which
skips httpx's objects altogether. FCM and APNs speak HTTP/2 through `notifications.backends.h2transport`,
Web Push through httpx's own transport (one connection multiplexes).

What callers can rely on:
- A failure before any request byte was written raises `httpx.ConnectError` or
  `httpx.LocalProtocolError` (nothing was sent).
- After that, failures raise `httpx.ReadError` / `httpx.RemoteProtocolError` (the peer may have it).
- Just before the first byte is written, the request's `trace` extension (if any) hears
  `http11.send_request_headers.started`, like httpcore's; `exchange()` calls its `on_send`.
- Every answer belongs to the request it follows. HTTP/1.1 has no request ids, and a peer may write
  a stray answer (a second copy, written a few milliseconds after the first) at any moment after an
  exchange ended, so a connection is reused only after an answer that proved it was its request's
  own: the request carried an `Idempotency-Key` and the answer echoed that key back. Otherwise the
  connection carries nothing more: it is closed after the exchange, and later requests to an origin
  that does not echo go out with `Connection: close` (the peer then closes first). On a connection
  whose answers echo the key, an answer echoing another request's key is a stray: it is read to its
  end and dropped, and the request's own answer is the next one (at most `_MAX_STRAYS` are passed
  over). Besides that, a connection goes back to the pool only after an exchange read to its framed
  end with nothing more buffered, and it is reused only if, at that moment, nothing is buffered or
  readable on it (the probe httpcore does). An answer that arrives before the request was fully
  written is this request's answer, but its connection is not reused either. A cancelled, failed or
  cut-short exchange (a body read only up to a cap) closes the connection, and so does the peer's
  `close`.
"""

import asyncio
import select
import ssl
import time
from collections.abc import AsyncIterator, Callable

import httpx

from notifications.backends import http11
from notifications.backends.tls import client_context

_READ = 65536
_KEEPALIVE_SECONDS = 5.0  # an idle connection older than this is closed rather than reused
_ECHO = b"idempotency-key"  # the request header whose echo in an answer binds the answer to it
_MAX_STRAYS = 4  # answers echoing another request's key passed over before the exchange gives up
_CLOSE = (b"Connection", b"close")
_ORIGINS_KEPT = 1024  # origins remembered as not echoing (a webhook has one; the set must stay bounded)

Origin = tuple[bytes, bytes, int]


class _Connection:
    __slots__ = ("reader", "writer", "idle_since", "proved")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        self.proved = False  # an earlier answer on it echoed its request's key (so it was kept)

    def reusable(self, now: float) -> bool:
        """Whether the next request may use this idle connection: open, quiet, and not too old."""
        if self.writer.is_closing() or now - self.idle_since >= _KEEPALIVE_SECONDS:
            return False
        # Anything the peer sent since the last answer (an extra copy, an unsolicited 408, its close)
        # would be read as the next request's answer: such a connection is never reused.
        return not self.buffered() and not _readable(self.writer)

    def buffered(self) -> bool:
        """Whether the reader holds bytes (or the peer's EOF) that no exchange asked for."""
        reader = self.reader
        # StreamReader has no public "bytes waiting" query; its buffer is a private bytearray.
        waiting: bytearray = getattr(reader, "_buffer", bytearray())
        return bool(waiting) or reader.at_eof() or reader.exception() is not None

    def close(self) -> None:
        self.writer.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive, at most `max_connections` open at once (others wait for one)."""

    def __init__(self, *, max_connections: int, verify: bool | str | ssl.SSLContext = True) -> None:
        self._idle: dict[Origin, list[_Connection]] = {}
        self._max = max(1, max_connections)
        self._open = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        # Origins whose last answer did not echo its request's key: their connections are used once,
        # and their requests say `Connection: close` so that the peer ends the connection first.
        self._unproved: set[Origin] = set()

    async def exchange(
        self,
        method: bytes,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        content: bytes,
        *,
        cap: int,
        on_send: Callable[[], None],
        on_phase: Callable[[str], None] | None = None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        """One whole exchange with no httpx objects in between: (status, headers, body up to `cap`, cut).

        The push hot path (`capped_request` takes it for clients built on this transport): building an
        httpx Request and Response, the client's auth, redirect and hook layers and the streamed body's
        async generators are work a push needs none of.
        `headers` must carry Host; Content-Length is added from `content`.
        """
        key = _key(headers)
        wire = _framed(method, url, self._closing(url, headers, key), content)
        origin, connection = await self._acquire(url, on_phase)
        reusable = False
        try:
            on_send()
            response = await _send(connection, wire, head_request=method == b"HEAD", key=key, cap=cap)
            self._bind(origin, connection, response, key)
            chunks: list[bytes] = []
            size = 0
            while data := await response.chunk():
                left = cap - size
                if len(data) > left:
                    # Stop reading here: the rest stays unread and the connection is closed below.
                    chunks.append(data[:left])
                    return response.status, response.headers, b"".join(chunks), True
                chunks.append(data)
                size += len(data)
            reusable = response.keep_alive
            return response.status, response.headers, b"".join(chunks), False
        except (OSError, http11.ProtocolError) as exc:
            raise _read_error(exc) from exc
        finally:
            self._done(origin, connection, reusable=reusable)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        body = request.content if isinstance(request.stream, httpx.ByteStream) else await request.aread()
        # The body is sent whole, framed by its length (httpx may have announced a chunked stream).
        headers = [(n, v) for n, v in request.headers.raw if n.lower() not in (b"content-length", b"transfer-encoding")]
        key = _key(headers)
        wire = _framed(request.method.encode("ascii"), url, self._closing(url, headers, key), body)
        origin, connection = await self._acquire(url)
        trace = request.extensions.get("trace")
        try:
            if trace is not None:
                await trace("http11.send_request_headers.started", {"request": request})
            response = await _send(connection, wire, head_request=request.method == "HEAD", key=key, cap=_READ)
            self._bind(origin, connection, response, key)
        except (OSError, http11.ProtocolError) as exc:
            self._done(origin, connection, reusable=False)
            raise _read_error(exc) from exc
        except BaseException:
            self._done(origin, connection, reusable=False)
            raise
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(self, connection, origin, response),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason},
        )

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    # --- binding answers to requests ------------------------------------------------------------

    def _closing(
        self, url: httpx.URL, headers: list[tuple[bytes, bytes]], key: bytes | None
    ) -> list[tuple[bytes, bytes]]:
        """`headers`, with `Connection: close` when this request's answer cannot prove itself (no key to
        echo) or its origin's last answer did not: the connection will carry nothing after it."""
        if key is None or _origin(url) in self._unproved:
            return [*(field for field in headers if field[0].lower() != b"connection"), _CLOSE]
        return headers

    def _bind(self, origin: Origin, connection: _Connection, response: http11.Response, key: bytes | None) -> None:
        """Decide whether `response` is provably its request's answer, and whether its connection may be kept.

        Proved (it echoed the key): kept if nothing else forbids it. Not proved: the connection carries
        nothing more, and the origin's next requests say `Connection: close`. On a connection whose earlier
        answers echoed, an answer that does not is not taken as this request's: it may be anything the
        peer wrote out of turn (an unsolicited 408 racing the request), so the exchange fails."""
        echoed = response.field(_ECHO)
        response.bound = key is not None and echoed is not None  # `_send` passed over other keys' answers
        if response.bound:
            self._unproved.discard(origin)
            connection.proved = True
            return
        response.keep_alive = False
        if len(self._unproved) < _ORIGINS_KEPT:
            self._unproved.add(origin)
        if connection.proved and key is not None:
            raise http11.ProtocolError(
                f"an answer (HTTP {response.status}) without this request's Idempotency-Key on a connection "
                "whose earlier answers echoed theirs: it may not be this request's"
            )

    # --- the pool ---------------------------------------------------------------------------------

    async def _acquire(
        self, url: httpx.URL, on_phase: Callable[[str], None] | None = None
    ) -> tuple[Origin, _Connection]:
        origin = _origin(url)
        tls = origin[0] == b"https"
        port = origin[2]
        connection = self._idle_connection(origin)
        while connection is None and self._open >= self._max:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            connection = self._idle_connection(origin)
        if connection is not None:
            return origin, connection
        self._open += 1
        host = url.host
        if on_phase is not None:
            on_phase("connecting (TCP and TLS)" if tls else "connecting")
        try:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=self._context() if tls else None, server_hostname=host if tls else None, limit=_READ
            )
        except BaseException as exc:
            self._open -= 1
            self._wake()
            if isinstance(exc, (OSError, ssl.SSLError)):
                raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
            raise
        return origin, _Connection(reader, writer)

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.reusable(time.monotonic()):
                return connection
            self._discard(connection)
        return None

    def _done(self, origin: Origin, connection: _Connection, *, reusable: bool) -> None:
        if reusable and not connection.buffered():
            connection.idle_since = time.monotonic()
            self._idle.setdefault(origin, []).append(connection)
            self._wake()
        else:
            self._discard(connection)

    def _discard(self, connection: _Connection) -> None:
        connection.close()
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = client_context(self._verify, use="http/1.1")  # the trust store loaded once per process
        return self._ssl


def _framed(method: bytes, url: httpx.URL, headers: list[tuple[bytes, bytes]], content: bytes) -> bytes:
    try:
        return http11.request_bytes(method, url.raw_path, headers, content)
    except http11.LocalProtocolError as exc:
        raise httpx.LocalProtocolError(str(exc)) from exc


def _origin(url: httpx.URL) -> Origin:
    scheme = url.raw_scheme
    return scheme, url.raw_host, url.port or (443 if scheme == b"https" else 80)


def _key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The request's Idempotency-Key, which an answer may echo to prove it is this request's own."""
    for name, value in headers:
        if len(name) == 15 and name.lower() == _ECHO:
            return value.strip(b" \t")
    return None


async def _send(
    connection: _Connection, wire: bytes, *, head_request: bool, key: bytes | None, cap: int
) -> http11.Response:
    """Write the request and read the head of its own answer (the connection kept only if the answer
    proved it is its own; answers echoing another request's key are read past)."""
    writer = connection.writer
    writer.write(wire)
    early = False
    if writer.transport.get_write_buffer_size():
        # The request did not leave in one go: a peer may answer before reading all of it.
        await writer.drain()
        early = connection.buffered() or _readable(writer)
    for _ in range(_MAX_STRAYS + 1):
        response = http11.Response(connection.reader)
        await response.head(head_request=head_request)
        echoed = response.field(_ECHO)
        if key is None or echoed is None or echoed.strip(b" \t") == key:
            break
        # An answer to another request (a late copy of an earlier answer): it is none of this request's.
        await _drop(response, cap)
    else:
        raise http11.ProtocolError(f"more than {_MAX_STRAYS} answers to other requests came before this one's")
    if early:
        # An answer to half a request: it is this request's answer, but the peer may read the rest of
        # the request as another one and answer that too, so the connection carries nothing more.
        response.keep_alive = False
    return response


async def _drop(response: http11.Response, cap: int) -> None:
    """Read a stray answer's body to its framed end (at most `cap` bytes, else the exchange fails)."""
    size = 0
    while data := await response.chunk():
        size += len(data)
        if size > cap:
            raise http11.ProtocolError("a stray answer to another request longer than the body cap")


def _readable(writer: asyncio.StreamWriter) -> bool:
    """Whether the socket has bytes (or an EOF) the event loop has not read yet: a non-blocking probe."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True  # a socket we cannot probe is not one to trust with the next request
    return bool(readable)


class _Body(httpx.AsyncByteStream):
    """The response body, streamed; returns the connection to the pool only after a complete read."""

    def __init__(self, transport: LeanTransport, connection: _Connection, origin: Origin, response: http11.Response):
        self._transport = transport
        self._connection: _Connection | None = connection
        self._origin = origin
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._connection is None:
            return
        try:
            while data := await self._response.chunk():
                yield data
        except (OSError, http11.ProtocolError) as exc:
            await self.aclose()
            raise _read_error(exc) from exc

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            reusable = self._response.complete and self._response.keep_alive
            self._transport._done(self._origin, connection, reusable=reusable)


def _read_error(exc: BaseException) -> httpx.HTTPError:
    if isinstance(exc, http11.ProtocolError):
        return httpx.RemoteProtocolError(str(exc))
    if isinstance(exc, httpx.HTTPError):
        return exc
    return httpx.ReadError(f"{type(exc).__name__}: {exc}")

"""A lean HTTP/1.1 transport for `httpx.AsyncClient`: keep-alive connections on asyncio streams, h11 framing.

httpx's default async transport (httpcore over anyio) spent about 2 ms of CPU per request in a push
worker's profile, more than the rest of the worker together: per-request lock setup, a readability
probe of every pooled socket, and a pool scan per state change. A push backend needs far less: one
origin, keep-alive, a bound on open connections, and no surprises. This transport does that and no
more; everything above it (the client, request building, `MockTransport` in tests) stays httpx.
Backends that speak HTTP/2 (APNs, FCM) use httpx's own transport, where one connection multiplexes.

What callers can rely on:
- A failure before any request byte was written raises `httpx.ConnectError` (nothing was sent).
- After that, failures raise `httpx.ReadError` / `httpx.RemoteProtocolError` (the peer may have it).
- The request's `trace` extension (if any) hears `http11.send_request_headers.started` just before
  the first byte is written, like httpcore's, so a caller can tell the two apart on cancellation.
- A connection goes back to the pool only after a complete exchange; a cancelled or cut-short
  exchange (a body read only up to a cap) closes it.
"""

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import h11
import httpx

_READ = 65536
_KEEPALIVE_SECONDS = 5.0  # an idle connection older than this is closed rather than reused


class _Connection:
    __slots__ = ("reader", "writer", "h11", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=_READ)
        self.idle_since = 0.0

    def reusable(self, now: float) -> bool:
        # The peer closed an idle keep-alive connection: the loop has already seen its EOF.
        return not self.writer.is_closing() and not self.reader.at_eof() and now - self.idle_since < _KEEPALIVE_SECONDS

    def close(self) -> None:
        self.writer.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive, at most `max_connections` open at once (others wait for one)."""

    def __init__(self, *, max_connections: int, verify: bool | str | ssl.SSLContext = True) -> None:
        self._idle: dict[tuple[bytes, bytes, int], list[_Connection]] = {}
        self._max = max(1, max_connections)
        self._open = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        port = url.port or (443 if scheme == b"https" else 80)
        origin = (scheme, url.raw_host, port)
        connection = await self._acquire(origin, url.host, port, scheme == b"https")
        trace = request.extensions.get("trace")
        try:
            headers = [(name, value) for name, value in request.headers.raw]
            body = request.content if isinstance(request.stream, httpx.ByteStream) else await request.aread()
            wire = connection.h11.send(h11.Request(method=request.method, target=url.raw_path, headers=headers)) or b""
            if body:
                wire += connection.h11.send(h11.Data(data=body)) or b""
            wire += connection.h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            self._discard(connection)
            raise httpx.LocalProtocolError(str(exc)) from exc
        except BaseException:
            self._discard(connection)
            raise
        try:
            if trace is not None:
                await trace("http11.send_request_headers.started", {"request": request})
            connection.writer.write(wire)
            await connection.writer.drain()
            event = await self._next_event(connection)
            while isinstance(event, h11.InformationalResponse):
                event = await self._next_event(connection)
            if not isinstance(event, h11.Response):
                raise httpx.RemoteProtocolError(f"expected a response, got {type(event).__name__}")
        except (OSError, h11.RemoteProtocolError) as exc:
            self._discard(connection)
            raise _read_error(exc) from exc
        except BaseException:
            self._discard(connection)
            raise
        return httpx.Response(
            status_code=event.status_code,
            headers=event.headers,
            stream=_Body(self, connection, origin),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason},
        )

    async def exchange(
        self,
        method: bytes,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        content: bytes,
        *,
        cap: int,
        on_send: Callable[[], None],
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        """One whole exchange with no httpx objects in between: (status, headers, body up to `cap`, cut).

        The push hot path (`capped_request` takes it for clients built on this transport): building an
        httpx Request and Response, the client's auth, redirect and hook layers and the streamed body's
        async generators cost a push worker about as much CPU as the socket work itself. The failure
        contract is the one above; `on_send()` is called just before the first byte is written.
        `headers` must carry Host; Content-Length is added here.
        """
        scheme = url.raw_scheme
        port = url.port or (443 if scheme == b"https" else 80)
        origin = (scheme, url.raw_host, port)
        connection = await self._acquire(origin, url.host, port, scheme == b"https")
        reusable = False
        try:
            try:
                state = connection.h11
                head = [*headers, (b"Content-Length", str(len(content)).encode())]
                wire = state.send(h11.Request(method=method, target=url.raw_path, headers=head)) or b""
                if content:
                    wire += state.send(h11.Data(data=content)) or b""
                wire += state.send(h11.EndOfMessage()) or b""
            except h11.LocalProtocolError as exc:
                raise httpx.LocalProtocolError(str(exc)) from exc
            on_send()
            connection.writer.write(wire)
            await connection.writer.drain()
            event = await self._next_event(connection)
            while isinstance(event, h11.InformationalResponse):
                event = await self._next_event(connection)
            if not isinstance(event, h11.Response):
                raise httpx.RemoteProtocolError(f"expected a response, got {type(event).__name__}")
            chunks: list[bytes] = []
            size = 0
            while True:
                part = await self._next_event(connection)
                if isinstance(part, h11.Data):
                    room = cap - size
                    if len(part.data) > room:
                        # Stop reading here: the rest stays unread and the connection is closed below.
                        chunks.append(bytes(part.data[:room]))
                        return event.status_code, list(event.headers), b"".join(chunks), True
                    chunks.append(bytes(part.data))
                    size += len(part.data)
                elif isinstance(part, (h11.EndOfMessage, h11.ConnectionClosed)):
                    reusable = isinstance(part, h11.EndOfMessage)
                    return event.status_code, list(event.headers), b"".join(chunks), False
        except (OSError, h11.RemoteProtocolError) as exc:
            raise _read_error(exc) from exc
        finally:
            # Back to the pool only after a complete exchange; a cut, failed or cancelled one closes.
            if reusable:
                self._release(origin, connection)
            else:
                self._discard(connection)

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    # --- the pool ---------------------------------------------------------------------------------

    async def _acquire(self, origin: tuple[bytes, bytes, int], host: str, port: int, tls: bool) -> _Connection:
        now = time.monotonic()
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.reusable(now):
                return connection
            self._discard(connection)
        while self._open >= self._max:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            idle = self._idle.get(origin)
            while idle:
                connection = idle.pop()
                if connection.reusable(time.monotonic()):
                    return connection
                self._discard(connection)
        self._open += 1
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
        return _Connection(reader, writer)

    def _release(self, origin: tuple[bytes, bytes, int], connection: _Connection) -> None:
        state = connection.h11
        if state.our_state is h11.DONE and state.their_state is h11.DONE:
            state.start_next_cycle()
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
            verify = self._verify
            self._ssl = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        return self._ssl

    async def _next_event(self, connection: _Connection) -> Any:
        while True:
            event = connection.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await connection.reader.read(_READ)
            if not data and connection.h11.their_state is h11.SEND_RESPONSE:
                raise httpx.RemoteProtocolError("the peer closed the connection without a complete response")
            connection.h11.receive_data(data)


class _Body(httpx.AsyncByteStream):
    """The response body, streamed; returns the connection to the pool only after a complete read."""

    def __init__(self, transport: LeanTransport, connection: _Connection, origin: tuple[bytes, bytes, int]) -> None:
        self._transport = transport
        self._connection: _Connection | None = connection
        self._origin = origin

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        try:
            while True:
                event = await self._transport._next_event(connection)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    return
        except (OSError, h11.RemoteProtocolError) as exc:
            self._drop()
            raise _read_error(exc) from exc

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport._release(self._origin, connection)

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport._discard(connection)


def _read_error(exc: BaseException) -> httpx.HTTPError:
    if isinstance(exc, h11.RemoteProtocolError):
        return httpx.RemoteProtocolError(str(exc))
    if isinstance(exc, httpx.HTTPError):
        return exc
    return httpx.ReadError(f"{type(exc).__name__}: {exc}")

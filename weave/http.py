"""The core's HTTP rules for talking to outside services, shared by every app that does.

Whatever a peer sends is outside text, and a slow or huge answer must never hold a job:

- One deadline caps the whole exchange (connect, TLS, send, headers and body), however slowly the
  peer trickles bytes: `httpx.Timeout` alone bounds each read, not the request.
- A body is read up to `BODY_CAP` bytes; the rest is dropped unread.
- Redirects are never followed, and bodies are asked for without content coding, so a small
  compressed answer cannot expand past the cap.

The push backends apply these on their event loop (`notifications.backends.http.capped_request`,
`asyncio.timeout` around the exchange). A synchronous client uses `deadline_transport()` and wraps
each request in `whole_request_deadline(seconds)`, as the supplier-services client does.
"""

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

# Every answer we read is a small JSON object or an error page; past this it is not an answer we use.
BODY_CAP = 64 * 1024


class _Deadline(threading.local):
    """The monotonic instant the current request on this thread must be over by (None: no cap)."""

    at: float | None = None


_deadline = _Deadline()


def _time_left(timeout: float | None, kind: type[Exception]) -> float | None:
    """The socket timeout for the next operation: the per-operation one, shortened to the deadline."""
    if _deadline.at is None:
        return timeout
    left = _deadline.at - time.monotonic()
    if left <= 0:
        raise kind("the whole-request deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write stops at the request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        inner = self._inner.start_tls(ssl_context, server_hostname, _time_left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, with every stream bounded by the deadline of the request using it."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_transport() -> httpx.HTTPTransport:
    """Return a sync transport whose every connect, read and write stops at `whole_request_deadline`."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    # httpx builds its pool without a way to pass a network backend; replace it before the first
    # connection exists. If a future httpx renames this, fail loudly rather than lose the cap.
    if pool is None or not hasattr(pool, "_network_backend"):
        raise RuntimeError("httpx/httpcore changed: cannot install the whole-request deadline")
    pool._network_backend = _DeadlineBackend()
    return transport


@contextmanager
def whole_request_deadline(seconds: float) -> Iterator[None]:
    """Bound every request this thread makes inside the block, on a `deadline_transport()`, to `seconds` in all."""
    _deadline.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline.at = None

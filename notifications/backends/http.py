"""The one way a push backend talks HTTP: a capped exchange under one deadline.

`httpx.Timeout(t)` bounds each read, not the request: a peer that trickles one header byte a second
keeps a request alive forever, and `response.read()` takes a 300 MB body whole. So every backend
sends through `capped_request()`:

- one `asyncio.timeout` around connect, send, headers and body together: whatever the peer does,
  the exchange ends by the deadline;
- the body is streamed and kept up to `cap` bytes; the rest is dropped unread and noted;
- redirects are never followed (a 3xx is a configuration error, classified by the caller);
- the body is asked for without content coding, so a small compressed answer cannot expand.

A failed exchange raises `ExchangeFailed`, which says whether the request can have reached the peer
(`sent`): a connect failure cannot have delivered anything, a timeout after the request left may have.
"""

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx

from weave.edge import BODY_CAP, outside_text, parse_retry_after, safe_url

if TYPE_CHECKING:
    from notifications.backends.h2transport import H2Client
    from notifications.backends.transport import LeanTransport


class _NoCookies(httpx.Cookies):
    """A cookie jar that keeps nothing: push providers authenticate every request, and parsing each
    answer's Set-Cookie (httpx builds an email.message per response) cost a worker CPU for nothing."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class PushClient(httpx.AsyncClient):
    """`httpx.AsyncClient` without a cookie jar: a provider cannot plant state between sends.

    Built on the lean HTTP/1.1 transport, it also carries that transport as `lean`, so
    `capped_request()` can hand it whole exchanges and skip httpx's request and response layers.
    """

    def __init__(self, *, lean: "LeanTransport | None" = None, **kwargs: Any) -> None:
        # Whether the transport reports its phases through the `trace` extension (httpcore's and the
        # lean one do; a test's MockTransport does not), so "nothing was sent" can be believed.
        traced = "transport" not in kwargs
        if lean is not None:
            kwargs["transport"] = lean
        super().__init__(**kwargs)
        self.traced = traced
        self._cookies = _NoCookies()
        self.lean = lean
        # The client's default headers (User-Agent, Accept, ...) as the lean path sends them.
        self.lean_defaults: dict[str, tuple[str | bytes, str | bytes]] = {
            name.decode("latin-1").lower(): (name, value) for name, value in self.headers.raw
        }


def make_client(
    *, timeout: float, concurrency: int, http2: bool = False, verify: Any = True, **extra: Any
) -> httpx.AsyncClient:
    """Return a pooled async client as wide as the worker's concurrency, which never follows redirects.

    HTTP/1.1 backends get the lean transport (`notifications.backends.transport`); `http2=True` gets
    httpx's own, where one connection multiplexes the worker's requests (FCM and APNs use the lean
    HTTP/2 client, `notifications.backends.h2transport`, instead; this is their plain-http fallback).
    """
    # Per-phase timeouts are only a backstop: `capped_request()` bounds the whole exchange.
    common: dict[str, Any] = {"timeout": httpx.Timeout(timeout), "follow_redirects": False, **extra}
    if http2:
        from notifications.backends.tls import client_context

        return PushClient(
            http2=True,
            verify=client_context(verify, use="httpcore"),  # the trust store loaded once per process
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            **common,
        )
    from notifications.backends.transport import LeanTransport

    return PushClient(lean=LeanTransport(max_connections=concurrency, verify=verify), **common)


@dataclass(frozen=True)
class CappedResponse:
    """A response whose body was read up to the cap, within the deadline."""

    status: int
    headers: httpx.Headers
    body: bytes  # at most the cap
    truncated: bool  # the peer sent more than the cap; the rest was dropped unread
    latency_ms: int

    def json(self) -> Any:
        """Parse the (capped) body as JSON; raise ValueError for anything else, truncation included."""
        if self.truncated:
            raise ValueError(f"the body was longer than {len(self.body)} bytes and was cut")
        import json

        return json.loads(self.body)

    def retry_after(self) -> float | None:
        """Seconds the peer asked us to wait (delta-seconds or HTTP-date against its own Date), or None."""
        return parse_retry_after(self.headers.get("Retry-After"), self.headers.get("Date"))

    def snippet(self, *, secrets: tuple[str, ...] | list[str] = ()) -> str:
        """Return the body as a safe one-line snippet, saying when it was cut."""
        text = outside_text(self.body.strip(), secrets=secrets)
        return f"{text} [body cut at {len(self.body)} bytes]" if self.truncated else text

    def location(self, *, secrets: tuple[str, ...] | list[str] = ()) -> str:
        """Return the Location header without userinfo or secrets, safe for a reason."""
        return outside_text(safe_url(self.headers.get("Location", "")), secrets=secrets, limit=200)


class ExchangeFailed(Exception):
    """The exchange produced no complete response. `sent` says whether the request may have arrived.

    `kind` is "unreachable" (nothing left: the connection or TLS failed), "stalled" (nothing left
    before the deadline: still connecting, in TLS, or waiting for a connection or a stream),
    "refused" (the peer refused the stream unprocessed: REFUSED_STREAM, or a GOAWAY below it),
    "timeout" or "dropped" (the request left; the provider may have it). `phase` says, for a
    request that never left, where it was when it stopped ("in the TLS handshake").
    """

    def __init__(
        self,
        *,
        kind: str,
        detail: str,
        sent: bool,
        latency_ms: int,
        deadline: float = 0.0,
        phase: str = "",
        incident: str = "",
    ) -> None:
        super().__init__(detail)
        self.incident = incident  # the one event it shares with other failed requests (`SendResult.incident`)
        self.deadline = deadline  # the whole exchange's bound, seconds
        self.kind = kind
        self.detail = detail  # sanitized by the caller's secrets
        self.sent = sent
        self.latency_ms = latency_ms
        self.phase = phase


# Where a request that never left was, by the last trace event it heard (httpcore's names).
_PHASES = {
    "connection.connect_tcp.started": "connecting",
    "connection.connect_tcp.complete": "starting TLS",
    "connection.connect_tcp.failed": "connecting",
    "connection.start_tls.started": "in the TLS handshake",
    "connection.start_tls.failed": "in the TLS handshake",
    "connection.start_tls.complete": "waiting for the connection to be ready",
    "http2.send_connection_init.started": "opening the HTTP/2 connection",
    "http2.send_connection_init.complete": "waiting for a free HTTP/2 stream",
}
_WAITING = "waiting for a free connection or stream"


class _Progress:
    """Tracks, through the transport's trace hook, whether the request started leaving this host.

    httpcore (and the lean transport) report each phase; the request's HEADERS (HTTP/2) or first
    byte (HTTP/1.1) leaving is `send_request_headers.started`. Before it, nothing was sent.
    """

    __slots__ = ("sent", "trusted", "phase", "stream_id")

    def __init__(self, *, trusted: bool) -> None:
        self.sent = False
        # Whether the transport reports its phases: a test's MockTransport reports nothing, so the worst
        # (the request left) must be assumed for it.
        self.trusted = trusted
        self.phase = _WAITING
        self.stream_id = 0

    async def __call__(self, event: str, info: Mapping[str, Any]) -> None:
        if event.endswith("send_request_headers.started"):
            self.sent = True
            self.stream_id = int(info.get("stream_id") or 0)
        elif event == "http2.send_request_headers.failed":
            # The HEADERS frame did not get out whole: a peer cannot process a stream it has no
            # complete header block for. (On HTTP/1.1 a failed write may still have sent a part.)
            self.sent = False
            self.phase = "writing the request headers, which did not get out whole"
        elif event in _PHASES:
            self.phase = _PHASES[event]

    def mark_sent(self) -> None:
        """The lean path's report that the first request byte is about to be written."""
        self.sent = True

    def at(self, phase: str) -> None:
        """The lean path's report of where a request that has not left yet is."""
        self.phase = phase

    @property
    def maybe_sent(self) -> bool:
        return self.sent or not self.trusted


async def capped_request(
    client: "httpx.AsyncClient | H2Client",
    method: str,
    url: str | httpx.URL,
    *,
    deadline: float,
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
    cap: int = BODY_CAP,
    secrets: tuple[str, ...] | list[str] = (),
) -> CappedResponse:
    """Run one exchange bounded by `deadline` seconds in total; read at most `cap` body bytes.

    Raises `ExchangeFailed` (with sanitized detail) when no complete answer came.
    """
    if not isinstance(client, httpx.AsyncClient):
        h2_client = client
        if h2_client.fallback is None or h2_client.speaks_http2(str(url)):
            try:
                return await _h2_exchange(h2_client, method, str(url), headers or {}, content, cap, deadline, secrets)
            except ExchangeFailed as exc:
                if h2_client.fallback is None or h2_client.speaks_http2(str(url)):
                    raise
                deadline = max(0.0, deadline - exc.latency_ms / 1000)  # nothing was sent: go on over HTTP/1.1
        client = cast(httpx.AsyncClient, h2_client.fallback)
    progress = _Progress(trusted=getattr(client, "traced", False))
    started = time.monotonic()
    sent_headers = {"Accept-Encoding": "identity", **(headers or {})}
    lean_client = client if isinstance(client, PushClient) and client.lean is not None else None
    try:
        async with asyncio.timeout(deadline):
            target = httpx.URL(url)
            # httpx turns a URL's userinfo into Basic auth: such a URL takes httpx's own path.
            if lean_client is not None and not target.userinfo:
                status, raw, body, truncated = await _lean_exchange(
                    lean_client, method, target, sent_headers, content, cap, progress
                )
                response_headers = httpx.Headers(raw)
            else:
                async with client.stream(
                    method,
                    target,
                    headers=sent_headers,
                    content=content,
                    follow_redirects=False,
                    extensions={"trace": progress},
                ) as response:
                    body, truncated = await _read_capped(response, cap)
                status, response_headers = response.status_code, response.headers
    except (TimeoutError, httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise _failure(exc, progress, started=started, deadline=deadline, secrets=secrets) from exc
    return CappedResponse(
        status=status,
        headers=response_headers,
        body=body,
        truncated=truncated,
        latency_ms=_ms(started),
    )


async def _h2_exchange(
    client: "H2Client",
    method: str,
    url: str,
    headers: Mapping[str, str],
    content: bytes | None,
    cap: int,
    deadline: float,
    secrets: tuple[str, ...] | list[str],
) -> CappedResponse:
    """The same exchange on the lean HTTP/2 client (`notifications.backends.h2transport`)."""
    from notifications.backends.h2transport import H2Failure

    progress = _Progress(trusted=True)
    started = time.monotonic()
    # HTTP/2 header names are lower case; the body is asked for without content coding.
    raw = [(b"accept-encoding", b"identity")]
    raw += [(name.lower().encode("ascii"), value.encode("utf-8")) for name, value in headers.items()
            if name.lower() not in ("accept-encoding", "content-length", "host")]  # fmt: skip
    try:
        async with asyncio.timeout(deadline):
            status, response_headers, body, truncated = await client.exchange(
                method, url, raw, content or b"", cap=cap, progress=progress, deadline_at=started + deadline
            )
    except H2Failure as exc:
        said = outside_text(exc.detail, secrets=secrets, limit=300)
        phase = progress.phase if not exc.sent else ""
        kind = exc.kind if exc.sent or exc.kind == "refused" else "unreachable"
        raise ExchangeFailed(
            kind=kind,
            detail=said,
            sent=exc.sent,
            latency_ms=_ms(started),
            deadline=deadline,
            phase=phase,
            incident=exc.incident,
        ) from exc
    except (TimeoutError, UnicodeError, ValueError) as exc:
        raise _failure(exc, progress, started=started, deadline=deadline, secrets=secrets) from exc
    return CappedResponse(
        status=status, headers=httpx.Headers(response_headers), body=body, truncated=truncated, latency_ms=_ms(started)
    )


def _failure(
    exc: BaseException, progress: _Progress, *, started: float, deadline: float, secrets: tuple[str, ...] | list[str]
) -> ExchangeFailed:
    """The `ExchangeFailed` for an exchange that ended in `exc`: what it was doing, and whether it sent."""
    said = f"{_name(exc)}: {outside_text(str(exc), secrets=secrets, limit=200)}"
    common: dict[str, Any] = {"latency_ms": _ms(started), "deadline": deadline, "phase": progress.phase}
    if isinstance(exc, TimeoutError):
        sent = progress.maybe_sent
        detail = f"the whole exchange is capped at {deadline:g} s; {_name(exc)}"
        return ExchangeFailed(kind="timeout" if sent else "stalled", detail=detail, sent=sent, **common)
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return ExchangeFailed(kind="unreachable", detail=said, sent=False, **common)
    if progress.sent and (refusal := _refused_unprocessed(exc, progress.stream_id)):
        # HTTP/2 says the peer did not process this stream: nothing can have been delivered.
        return ExchangeFailed(kind="refused", detail=refusal, sent=False, **common)
    if isinstance(exc, httpx.TimeoutException):
        return ExchangeFailed(kind="timeout", detail=_name(exc), sent=progress.maybe_sent, **common)
    # Transport errors, protocol violations, header garbage: the answer is unusable.
    sent = progress.maybe_sent
    if not sent and isinstance(exc, (httpx.LocalProtocolError, httpx.InvalidURL, httpx.UnsupportedProtocol)):
        common["phase"] = "before sending: the request could not be built"
    return ExchangeFailed(kind="dropped" if sent else "unreachable", detail=said, sent=sent, **common)


def _refused_unprocessed(exc: BaseException, stream_id: int) -> str:
    """Why the peer is known not to have processed `stream_id` (REFUSED_STREAM, a GOAWAY below it), or ""."""
    import h2.errors
    import h2.events

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        for arg in cause.args:
            if isinstance(arg, h2.events.StreamReset) and arg.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
                return f"the peer reset stream {arg.stream_id} with REFUSED_STREAM (not processed)"
            if isinstance(arg, h2.events.ConnectionTerminated) and stream_id > (arg.last_stream_id or 0):
                code = getattr(arg.error_code, "name", arg.error_code)
                return (
                    f"the peer sent GOAWAY ({code}) with last stream id {arg.last_stream_id or 0}, "
                    f"below this request's stream {stream_id} (not processed)"
                )
        cause = cause.__cause__ or cause.__context__
    return ""


async def _lean_exchange(
    client: PushClient,
    method: str,
    target: httpx.URL,
    headers: Mapping[str, str],
    content: bytes | None,
    cap: int,
    progress: _Progress,
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """The same exchange as `client.stream(...)`, straight on the lean transport (see PushClient)."""
    if not target.is_absolute_url or target.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"the URL must be absolute http:// or https://, not {safe_url(str(target))!r}")
    # Later entries win, by case-insensitive name: the client's defaults, then the caller's headers.
    merged = dict(client.lean_defaults)
    for name, value in headers.items():
        merged[name.lower()] = (name, value)
    merged.pop("content-length", None)  # the transport frames the body itself
    merged.pop("host", None)
    raw = [(b"Host", target.netloc)]
    raw += [(_encoded(name, "ascii"), _encoded(value, "utf-8")) for name, value in merged.values()]
    assert client.lean is not None
    return await client.lean.exchange(
        method.encode("ascii"), target, raw, content or b"", cap=cap, on_send=progress.mark_sent,
        on_phase=progress.at,
    )  # fmt: skip


def _encoded(text: str | bytes, encoding: str) -> bytes:
    return text if isinstance(text, bytes) else text.encode(encoding)


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """Read raw body bytes up to `cap`; stop reading (and close) as soon as more arrives."""
    if hasattr(response, "_content"):
        # Already in memory (a test's MockTransport built it whole): nothing left to stream.
        return response.content[:cap], len(response.content) > cap
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        left = cap - size
        if len(chunk) > left:
            chunks.append(chunk[:left])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _ms(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))


# One encoder for every request body: `json.dumps` with options builds a new JSONEncoder on each call.
_BODY_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def json_body(value: Any) -> bytes:
    """`json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()`, with one encoder for all."""
    return _BODY_JSON.encode(value).encode()

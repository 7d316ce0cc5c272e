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
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from weave.retry import parse_retry_after
from weave.sanitize import outside_text, safe_url

if TYPE_CHECKING:
    from notifications.backends.transport import LeanTransport

BODY_CAP = 64 * 1024


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
        if lean is not None:
            kwargs["transport"] = lean
        super().__init__(**kwargs)
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

    HTTP/1.1 backends get the lean transport (`notifications.backends.transport`); HTTP/2 backends get
    httpx's own, where one connection multiplexes the worker's requests.
    """
    # Per-phase timeouts are only a backstop: `capped_request()` bounds the whole exchange.
    common: dict[str, Any] = {"timeout": httpx.Timeout(timeout), "follow_redirects": False, **extra}
    if http2:
        return PushClient(
            http2=True,
            verify=verify,
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
    """The exchange produced no complete response. `sent` says whether the request may have arrived."""

    def __init__(self, *, kind: str, detail: str, sent: bool, latency_ms: int, deadline: float = 0.0) -> None:
        super().__init__(detail)
        self.deadline = deadline  # the whole exchange's bound, seconds
        self.kind = kind  # "unreachable", "timeout", "dropped"
        self.detail = detail  # sanitized by the caller's secrets
        self.sent = sent
        self.latency_ms = latency_ms


class _Progress:
    """Tracks, through httpcore's trace hook, whether the request started leaving this host."""

    __slots__ = ("seen", "sent")

    def __init__(self) -> None:
        self.seen = False
        self.sent = False

    async def __call__(self, event: str, info: Mapping[str, Any]) -> None:
        self.seen = True
        if event.endswith("send_request_headers.started"):
            self.sent = True

    def mark_sent(self) -> None:
        """The lean path's report that the first request byte is about to be written."""
        self.sent = True

    @property
    def maybe_sent(self) -> bool:
        # A transport without httpcore (a test's MockTransport) reports nothing: assume the worst.
        return self.sent or not self.seen


async def capped_request(
    client: httpx.AsyncClient,
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
    progress = _Progress()
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
    except TimeoutError as exc:
        raise ExchangeFailed(
            kind="timeout" if progress.maybe_sent else "unreachable",
            detail=f"the whole exchange is capped at {deadline:g} s; {_name(exc)}",
            sent=progress.maybe_sent,
            latency_ms=_ms(started),
            deadline=deadline,
        ) from exc
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise ExchangeFailed(
            kind="unreachable",
            detail=f"{_name(exc)}: {outside_text(str(exc), secrets=secrets, limit=200)}",
            sent=False,
            latency_ms=_ms(started),
        ) from exc
    except httpx.TimeoutException as exc:
        raise ExchangeFailed(
            kind="timeout",
            detail=_name(exc),
            sent=progress.maybe_sent,
            latency_ms=_ms(started),
            deadline=deadline,
        ) from exc
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:
        # Transport errors, protocol violations, header garbage: the answer is unusable.
        kind = "dropped" if progress.maybe_sent else "unreachable"
        raise ExchangeFailed(
            kind=kind,
            detail=f"{_name(exc)}: {outside_text(str(exc), secrets=secrets, limit=200)}",
            sent=progress.maybe_sent,
            latency_ms=_ms(started),
        ) from exc
    return CappedResponse(
        status=status,
        headers=response_headers,
        body=body,
        truncated=truncated,
        latency_ms=_ms(started),
    )


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
    progress.seen = True  # this path reports exactly when the request starts to leave (mark_sent)
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
        method.encode("ascii"), target, raw, content or b"", cap=cap, on_send=progress.mark_sent
    )


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
        room = cap - size
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _ms(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))

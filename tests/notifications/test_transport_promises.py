"""The webhook's two transport paths keep the edge's promises: a body read up to the cap, no cookies kept.

A plain URL takes the lean HTTP/1.1 path; a URL with userinfo (sent as Basic auth) takes httpx's
streamed path. Both are driven through `WebhookBackend.send()`, against real local servers: the fake
provider's `huge` body mode, and a small server here that plants cookies and records what comes back.
"""

import asyncio
import json
import re
import threading
import time
import uuid

import pytest

from notifications.backends.base import Outcome, PushMessage
from notifications.backends.webhook import WebhookBackend
from weave.testing.fake_http import FakeHandler, FakeHTTPServer, FakeService

TOKEN = "transport-token"


def _kernel_buffers() -> int:
    """The most loopback TCP can hold unread: the receiver's largest buffer plus the sender's.

    Bytes the kernels buffered were never read by the client, yet the fake counts them as sent; under
    load the receive buffer grows (autotuning) to several MiB while the client is about to close."""
    total = 0
    for name in ("tcp_rmem", "tcp_wmem"):
        try:
            with open(f"/proc/sys/net/ipv4/{name}") as limits:
                total += int(limits.read().split()[-1])
        except (OSError, ValueError, IndexError):
            total += 8 * 1024 * 1024  # not Linux: a generous guess
    return total


# Twice what the kernels could ever hold unread, and at least 128 times the body cap: a client that
# read the whole body would have been sent more than half of it, one that stopped at the cap less.
HUGE = max(8 * 1024 * 1024, 2 * (_kernel_buffers() + 1024 * 1024))


def plain(url: str) -> str:
    return url


def with_userinfo(url: str) -> str:
    return url.replace("http://", "http://relay:hunter22@", 1)


PATHS = [pytest.param(plain, id="lean"), pytest.param(with_userinfo, id="userinfo-streamed")]


def _message() -> PushMessage:
    return PushMessage(idempotency_key=str(uuid.uuid4()), token="device-1", title="Hello", body="World")


def _send(url: str, count: int = 1):
    backend = WebhookBackend(alias="default", options={"url": url, "token": TOKEN}, timeout=10.0, concurrency=1)

    async def go():
        try:
            return [await backend.send(_message()) for _ in range(count)]  # in turn, on one client
        finally:
            await backend.aclose()

    return asyncio.run(go())


def _eventually(predicate, seconds: float = 10.0) -> bool:
    # Waits for the server thread to notice the hang-up; an event, not a latency bound.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.mark.parametrize("url_for", PATHS)
def test_webhook__a_huge_body_is_read_only_up_to_the_cap_on_either_path(fake, url_for):
    fake.configure(body_mode="huge", huge_bytes=HUGE)

    (result,) = _send(url_for(fake.push_url))

    # Delivered (2xx), with the cut noted: a cut body is never parsed as the provider's JSON.
    assert result.outcome == Outcome.DELIVERED
    assert re.search(r"body cut at \d+ bytes", result.reason), result.reason
    assert _eventually(lambda: fake.stats()["aborted"] == 1), fake.stats()
    assert fake.stats()["completed_hostile"] == 0
    assert fake.stats()["bytes_sent"] < HUGE // 2  # the rest was never read (see HUGE)


class _CookieState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cookies: list[str | None] = []
        self.authorizations: list[str | None] = []


class _CookieHandler(FakeHandler):
    server: "_CookieServer"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.state.lock:
            self.server.state.cookies.append(self.headers.get("Cookie"))
            self.server.state.authorizations.append(self.headers.get("Authorization"))
        body = json.dumps({"id": f"m-{uuid.uuid4().hex[:8]}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "planted=from-the-provider; Path=/")
        self.send_header("Set-Cookie", "tracker=1; Path=/; Max-Age=3600")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _CookieServer(FakeHTTPServer):
    state: _CookieState


class CookiePlanter(FakeService[_CookieServer]):
    """Answers every POST 200 with two Set-Cookie headers; records each request's Cookie header."""

    def __init__(self) -> None:
        server = _CookieServer(("127.0.0.1", 0), _CookieHandler)
        server.state = _CookieState()
        super().__init__(server)

    @property
    def state(self) -> _CookieState:
        return self._server.state


@pytest.mark.parametrize("url_for", PATHS)
def test_webhook__keeps_no_cookies_a_provider_sets_on_either_path(url_for):
    with CookiePlanter() as planter:
        results = _send(url_for(f"{planter.url}/push"), count=3)

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 3, [r.reason for r in results]
    assert planter.state.cookies == [None, None, None]
    auth = planter.state.authorizations
    assert len(auth) == 3 and all(a for a in auth)  # the credentials it is given, and nothing planted


@pytest.mark.parametrize("url_for", PATHS)
def test_webhook__a_redirect_is_never_followed_on_either_path(fake, url_for):
    # Where it points answers nothing: a followed redirect would show as a different, unreachable outcome.
    fake.configure(redirect_to="http://127.0.0.1:9/elsewhere", redirect_status=307)

    (result,) = _send(url_for(fake.push_url))

    assert (result.outcome, result.http_status, result.systemic, result.fatal) == (Outcome.TEMPORARY, 307, True, True)
    assert "redirects are never followed" in result.reason and "127.0.0.1:9/elsewhere" in result.reason
    assert fake.stats()["requests"] == 1
    assert "hunter22" not in result.reason

"""The bookkeeping every push fake shares: what arrived, what a phone would show, and which faults to inject.

A fake's state is read by the test thread while the server's event loop writes it, so every access
goes through one lock. "Shown" models the device screen: a message with the same collapse key
(apns-collapse-id, FCM tag, Web Push Topic) replaces the one shown before, instead of stacking,
which is what lets a test tell a harmless resend from a visible duplicate.
"""

import asyncio
import random
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Self

from weave.testing.fake_http import update_settings

if TYPE_CHECKING:
    import ssl

    from notifications.testing.asgi_fake import HypercornFake, Response


@dataclass
class Faults:
    """Faults a fake injects. `script` is consumed one entry per push request, before `rate`-based errors."""

    latency_ms: int = 0
    error: str = ""  # the provider-specific error to answer with `rate` probability, e.g. "UNAVAILABLE"
    rate: float = 0.0
    retry_after: str = ""  # sent with throttling and unavailability answers when set
    rate_hang: float = 0.0  # deliver, then answer only after hang_seconds (past the client's timeout)
    hang_seconds: float = 5.0
    script: list[str] = field(default_factory=list)  # one error name per request; "" or "ok" means deliver
    seed: int | None = None
    # --- hostile modes ---------------------------------------------------------------------------------
    # Connection-level faults (see `notifications.testing.wire_faults`): "stall_tls", "refuse_streams",
    # "goaway" and "goaway_graceful" (after `goaway_after` streams), "max_streams_1", "reset_after", "reset_before",
    # "drop_before", "hang_before", "tiny_window", "shut_window", "stray_stream", and "stream_limit" (no
    # fault: `stream_limit` streams at once per connection). Applies to connections opened after it is set.
    wire: str = ""
    goaway_after: int = 1
    stream_limit: int = 100
    # Whatever the status, the answer's body can be made hostile: "huge" (`huge_bytes` of filler,
    # streamed), "trickle" (one byte every `trickle_interval` s), "nul" (NUL and control bytes),
    # "binary" (not UTF-8), "echo" (the request's headers, credentials included).
    body_mode: str = ""
    huge_bytes: int = 8 * 1024 * 1024
    trickle_interval: float = 0.05
    # Hang BEFORE delivering (then answer 503 after hang_seconds, long after the client gave up): the
    # request was sent and lost before delivery. For a drop or a reset before delivery, see `wire`.
    rate_hang_before: float = 0.0
    # FCM's token endpoint only: "500" (a server error, with Retry-After when `retry_after` is set),
    # "html" (200 with an HTML page), "hang" (answer after hang_seconds), "invalid_grant" (400, the
    # service account refused), "401"; and the `expires_in` to hand out (None: the fake's lifetime).
    token_fault: str = ""
    token_expires_in: int | None = None

    def update(self, values: dict[str, Any]) -> None:
        from notifications.testing.wire_faults import WIRE_MODES

        if "wire" in values and values["wire"] not in WIRE_MODES:
            raise ValueError(f"unknown wire fault {values['wire']!r}; known: {', '.join(sorted(WIRE_MODES - {''}))}")
        if "token_fault" in values and values["token_fault"] not in TOKEN_FAULTS:
            raise ValueError(f"unknown token_fault {values['token_fault']!r}; known: {', '.join(sorted(TOKEN_FAULTS))}")
        if "body_mode" in values and values["body_mode"] not in BODY_MODES:
            raise ValueError(f"unknown body_mode {values['body_mode']!r}; known: {', '.join(sorted(BODY_MODES))}")
        update_settings(self, values)


BODY_MODES = frozenset({"", "huge", "trickle", "nul", "binary", "echo"})
TOKEN_FAULTS = frozenset({"", "500", "html", "hang", "invalid_grant", "401"})


@dataclass
class Delivery:
    """One accepted message, as the fake understood it."""

    token: str
    collapse: str  # what replaces on screen ("" stacks)
    message: dict[str, Any]
    headers: dict[str, str]


class FakeState:
    def __init__(self, faults: Faults | None = None) -> None:
        from notifications.testing.wire_faults import WireLog

        self.faults = faults or Faults()
        self.wire = WireLog()  # what connections under a wire fault saw
        self.lock = threading.Lock()
        self.random = random.Random(self.faults.seed)
        self.in_flight = 0
        self._clear()

    def reset(self) -> None:
        """Forget every request (faults stay); requests still being served stay counted as in flight."""
        with self.lock:
            self._clear()
        self.wire.clear()

    def _clear(self) -> None:
        self.requests = 0
        self.max_in_flight = self.in_flight
        self.by_status: dict[str, int] = {}
        self.by_reason: dict[str, int] = {}
        self.deliveries: list[Delivery] = []
        self.shown: dict[str, dict[str, Delivery]] = {}  # token -> collapse (or a unique id) -> delivery
        self.http_versions: dict[str, int] = {}
        self.connections: set[str] = set()  # peers (host:port) seen: HTTP/2 multiplexing keeps this small

    def configure(self, **faults: Any) -> None:
        with self.lock:
            self.faults.update(faults)
            if "seed" in faults:
                self.random = random.Random(self.faults.seed)

    def begin(self, http_version: str, client: str = "") -> tuple[Faults, float]:
        """Count a push request; return a copy of the faults and a random draw."""
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.http_versions[http_version] = self.http_versions.get(http_version, 0) + 1
            self.connections.add(client)
            faults = Faults(**{**asdict(self.faults), "script": []})
            return faults, self.random.random()

    def pop_script(self) -> str:
        """The next scripted error, taken only by a request that got past the provider's own checks."""
        with self.lock:
            return self.faults.script.pop(0) if self.faults.script else ""

    def end(self, status: int, reason: str = "") -> None:
        with self.lock:
            self.in_flight -= 1
            self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1
            if reason:
                self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def deliver(self, delivery: Delivery) -> int:
        """Record an accepted message; return how many messages that token now shows."""
        with self.lock:
            self.deliveries.append(delivery)
            screen = self.shown.setdefault(delivery.token, {})
            screen[delivery.collapse or f"#{len(self.deliveries)}"] = delivery
            return len(screen)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": self.requests,
                "delivered": len(self.deliveries),
                "shown": sum(len(screen) for screen in self.shown.values()),
                "by_status": dict(self.by_status),
                "by_reason": dict(self.by_reason),
                "http_versions": dict(self.http_versions),
                "connections": len(self.connections),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "faults": asdict(self.faults),
                "wire": self.wire.snapshot(),
            }


async def apply_latency(faults: Faults, draw: float) -> bool:
    """Sleep the configured latency; return whether this request should hang after delivering.

    A request drawn for `rate_hang_before` (the band right after the hang and error bands) hangs
    here, before anything is delivered, and then raises `LostBeforeDelivery`.
    """
    if faults.latency_ms:
        await asyncio.sleep(faults.latency_ms / 1000)
    edge = faults.rate_hang + faults.rate
    if edge <= draw < edge + faults.rate_hang_before:
        await asyncio.sleep(faults.hang_seconds)
        raise LostBeforeDelivery("hung before delivering")
    return draw < faults.rate_hang


class LostBeforeDelivery(Exception):
    """This request ends without a delivery (the fake answers 503 long after the client gave up)."""


def hostile_body(faults: Faults, response: "Response", headers: dict[str, str], url: str) -> "Response":
    """`response` with the body `faults.body_mode` asks for; "huge" and "trickle" are streamed by AsgiApp."""
    mode = faults.body_mode
    if mode == "nul":
        response.body = b'{"reason": "bad\x00token\x00"}\x00\r\nevent=completed job=notification id=1\x1b[31m'
    elif mode == "binary":
        response.body = bytes(range(256)) + b"\xff\xfe\xc3\x28\xed\xa0\x80"
    elif mode == "echo":
        echoed = "".join(f"{name}: {value}\n" for name, value in headers.items())
        response.body = f"You sent POST {url}\n{echoed}".encode()
    elif mode == "huge":
        response.huge = faults.huge_bytes
    elif mode == "trickle":
        response.trickle = faults.trickle_interval
    return response


def retry_after_value(spec: str) -> str:
    """The Retry-After header for `spec`: seconds as given, or "date:<seconds>" for an HTTP-date that far ahead."""
    if spec.startswith("date:"):
        import time
        from email.utils import formatdate

        return formatdate(time.time() + float(spec[5:]), usegmt=True)
    return spec


def pick_error(faults: Faults, draw: float, scripted: str) -> str:
    """The error to answer with, or "" to go on: a scripted entry first, then the random rate."""
    if scripted and scripted != "ok":
        return scripted
    if scripted == "ok":
        return ""
    # The hang band comes first in [0, rate_hang); errors use the band right after it.
    if faults.error and faults.rate_hang <= draw < faults.rate_hang + faults.rate:
        return faults.error
    return ""


class ProviderFake:
    """The control surface every push fake shares: its server's URL, start/stop (also as a context
    manager), and fault configuration. Subclasses set `server` and `state` and may extend `reset()`."""

    server: "HypercornFake"
    state: FakeState

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def configure(self, **faults: Any) -> None:
        self.state.configure(**faults)

    def start(self) -> Self:
        self.server.hostile = self._hostile
        self.server.start()
        return self

    async def _hostile(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        tls: "ssl.SSLContext | None",
        stop: asyncio.Event,
    ) -> bool:
        """Serve a new connection under the configured wire fault; False when there is none."""
        from notifications.testing.wire_faults import HostileH2, WireSettings

        with self.state.lock:
            faults = self.state.faults
            settings = WireSettings(
                mode=faults.wire, goaway_after=faults.goaway_after, hang_seconds=faults.hang_seconds,
                stream_limit=faults.stream_limit,
            )  # fmt: skip
        if not settings.mode:
            return False
        # Streams that get past the fault are answered by the same handler Hypercorn serves.
        handler = self._handle  # type: ignore[attr-defined]
        await HostileH2(settings, handler, self.state.wire, tls, stop).serve(reader, writer)
        return True

    def reset(self) -> None:
        self.state.reset()

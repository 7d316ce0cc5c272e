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
    from notifications.testing.asgi_fake import HypercornFake


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

    def update(self, values: dict[str, Any]) -> None:
        update_settings(self, values)


@dataclass
class Delivery:
    """One accepted message, as the fake understood it."""

    token: str
    collapse: str  # what replaces on screen ("" stacks)
    message: dict[str, Any]
    headers: dict[str, str]


class FakeState:
    def __init__(self, faults: Faults | None = None) -> None:
        self.faults = faults or Faults()
        self.lock = threading.Lock()
        self.random = random.Random(self.faults.seed)
        self.in_flight = 0
        self._clear()

    def reset(self) -> None:
        """Forget every request (faults stay); requests still being served stay counted as in flight."""
        with self.lock:
            self._clear()

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
            }


async def apply_latency(faults: Faults, draw: float) -> bool:
    """Sleep the configured latency; return whether this request should hang after delivering."""
    if faults.latency_ms:
        await asyncio.sleep(faults.latency_ms / 1000)
    return draw < faults.rate_hang


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

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def configure(self, **faults: Any) -> None:
        self.state.configure(**faults)

    def reset(self) -> None:
        self.state.reset()

"""A fake push provider that is a real HTTP server (standard library), with fault injection.

Tests start it in a thread on a free port; `manage.py fake_push_provider` serves it in the foreground.

    with FakePushProvider(latency_ms=50, rate_5xx=0.1) as fake:
        settings.WEAVE = {..., "PUSH_URL": fake.push_url}
        ...
        fake.stats()["unique_deliveries"]

Endpoints:
- `POST /push`: a push request. Dedups by `Idempotency-Key`: a key delivered once is never delivered again
  (the answer repeats the first message id with `"duplicate": true`).
- `GET /_stats`: see `FakePushProvider.stats()`.
- `POST /_reset`: forget every request (faults stay). `POST /_config` with a JSON object: change faults.
"""

import json
import random
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from email.utils import formatdate
from typing import Any

from weave.testing.fake_http import FakeHandler, FakeHTTPServer, FakeService, update_settings


@dataclass
class FaultConfig:
    """What the fake does to each push request. Rates are probabilities in [0, 1], drawn in this order."""

    latency_ms: int = 0  # added before answering every push request
    rate_429: float = 0.0
    retry_after: str = "1"  # seconds, or "date:<seconds>" to send an HTTP-date that many seconds ahead
    rate_5xx: float = 0.0
    status_5xx: int = 503
    retry_after_5xx: str = ""  # when set, 5xx answers carry this Retry-After too (same format as retry_after)
    # Answer status_5xx to the first request of every n-th new key (0: off): a deterministic "1 key in n"
    # temporary failure whose retry then succeeds, for latency measurements with no randomness.
    first_5xx_every: int = 0
    rate_hang: float = 0.0  # deliver, then answer only after hang_seconds (past the client's timeout)
    hang_seconds: float = 5.0
    rate_drop: float = 0.0  # deliver, then close the connection without an answer
    force_status: int | None = None  # answer every push with this status (e.g. 400, 404, 410, 408)
    malformed: bool = False  # answer 200 with a body that is not JSON
    token: str | None = None  # when set, any other bearer token gets 401
    seed: int | None = None

    def update(self, values: dict[str, Any]) -> None:
        update_settings(self, values)


class _State:
    """Everything the server has seen, behind one lock."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.random = random.Random(config.seed)
        self.reset()

    def reset(self) -> None:
        # Requests still being served (e.g. a hang from the previous test) stay counted as in flight,
        # so the counter never goes negative when they finish.
        self.in_flight = getattr(self, "in_flight", 0)
        self.max_in_flight = self.in_flight
        self.requests = 0
        self.per_key: dict[str, int] = {}
        self.delivered: dict[str, str] = {}  # idempotency key -> message id
        self.by_status: dict[str, int] = {}
        self.tokens: dict[str, str] = {}  # idempotency key -> device token ("to")
        self.log: list[dict[str, Any]] = []
        self.new_keys = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "unique_deliveries": len(self.delivered),
            "duplicates": self.requests - len(self.per_key),
            "per_key": dict(self.per_key),
            "delivered_keys": sorted(self.delivered),
            "by_status": dict(self.by_status),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "config": asdict(self.config),
        }


class _Handler(FakeHandler):
    server: "_Server"

    # --- control endpoints --------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/_stats":
            with self.server.state.lock:
                self._json(200, self.server.state.snapshot())
        elif self.path.rstrip("/") == "/_requests":
            with self.server.state.lock:
                self._json(200, {"requests": list(self.server.state.log)})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.rstrip("/")
        state = self.server.state
        if path == "/_reset":
            with state.lock:
                state.reset()
            self._json(200, {"reset": True})
        elif path == "/_config":
            try:
                with state.lock:
                    state.config.update(json.loads(body or b"{}"))
                    if "seed" in json.loads(body or b"{}"):
                        state.random = random.Random(state.config.seed)
            except (ValueError, TypeError) as exc:
                self._json(400, {"error": str(exc)})
                return
            self._json(200, asdict(state.config))
        else:
            self._push(body)

    # --- the push endpoint -----------------------------------------------------------------------------

    def _push(self, raw: bytes) -> None:
        state = self.server.state
        key = self.headers.get("Idempotency-Key", "")
        auth = self.headers.get("Authorization", "")
        with state.lock:
            state.requests += 1
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            state.per_key[key] = state.per_key.get(key, 0) + 1
            config = FaultConfig(**asdict(state.config))
            draw = state.random.random()
        try:
            if config.latency_ms:
                time.sleep(config.latency_ms / 1000)
            status, extra_headers, payload, after = self._decide(config, draw, key, auth, raw)
            with state.lock:
                state.by_status[str(status)] = state.by_status.get(str(status), 0) + 1
                state.log.append({"key": key, "status": status, "fault": after or None, "at": time.time()})
            if after == "drop":
                self.close_connection = True
                return
            if after == "hang":
                time.sleep(config.hang_seconds)
            self._respond(status, extra_headers, payload)
        finally:
            with state.lock:
                state.in_flight -= 1

    def _decide(
        self, config: FaultConfig, draw: float, key: str, auth: str, raw: bytes
    ) -> tuple[int, dict[str, str], bytes, str]:
        """Return (status, headers, body, after) for one push; `after` is "", "hang" or "drop"."""
        if config.token is not None and auth != f"Bearer {config.token}":
            return 401, {}, _dumps({"error": "invalid credentials"}), ""
        if not key:
            return 400, {}, _dumps({"error": "Idempotency-Key header is required"}), ""
        try:
            message = json.loads(raw)
            to = message["to"]
        except (ValueError, KeyError, TypeError):
            return 400, {}, _dumps({"error": "body must be a JSON object with 'to'"}), ""
        if config.force_status is not None and not 200 <= config.force_status < 300:
            return config.force_status, {}, _dumps({"error": f"forced {config.force_status}"}), ""
        edge = config.rate_429
        if draw < edge:
            return 429, {"Retry-After": _retry_after(config.retry_after)}, _dumps({"error": "slow down"}), ""
        edge += config.rate_5xx
        if draw < edge or self._first_of_every(config, key):
            headers = {"Retry-After": _retry_after(config.retry_after_5xx)} if config.retry_after_5xx else {}
            return config.status_5xx, headers, _dumps({"error": "provider trouble"}), ""
        edge += config.rate_hang
        after = "hang" if draw < edge else ""
        edge += config.rate_drop
        if not after and draw < edge:
            after = "drop"
        message_id, duplicate = self._deliver(key, to)
        if config.malformed:
            return 200, {}, b"<html>ok</html>", after
        return 200, {}, _dumps({"id": message_id, "duplicate": duplicate}), after

    def _first_of_every(self, config: FaultConfig, key: str) -> bool:
        if config.first_5xx_every <= 0:
            return False
        state = self.server.state
        with state.lock:
            if state.per_key.get(key) != 1:
                return False  # not this key's first request
            state.new_keys += 1
            return state.new_keys % config.first_5xx_every == 1 % config.first_5xx_every

    def _deliver(self, key: str, to: str) -> tuple[str, bool]:
        state = self.server.state
        with state.lock:
            if key in state.delivered:
                return state.delivered[key], True
            message_id = f"msg-{uuid.uuid4().hex[:16]}"
            state.delivered[key] = message_id
            state.tokens[key] = to
            return message_id, False

    def _respond(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): expected for hangs

    def _json(self, status: int, value: Any) -> None:
        self._respond(status, {}, _dumps(value))


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def _retry_after(spec: str) -> str:
    if spec.startswith("date:"):
        return formatdate(time.time() + float(spec[5:]), usegmt=True)
    return spec


class _Server(FakeHTTPServer):
    state: _State


class FakePushProvider(FakeService[_Server]):
    """The fake provider server. Start it with `start()` (a background thread) or `serve_forever()`."""

    thread_name = "fake-push"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, **faults: Any) -> None:
        self.config = FaultConfig(**faults)
        server = _Server((host, port), _Handler)
        server.state = _State(self.config)
        super().__init__(server)

    @property
    def push_url(self) -> str:
        return f"{self.url}/push"

    def stats(self) -> dict[str, Any]:
        """Return requests, unique_deliveries, duplicates, per_key, delivered_keys, by_status, max_in_flight."""
        state = self._server.state
        with state.lock:
            return state.snapshot()

    def reset(self) -> None:
        """Forget every request seen so far."""
        state = self._server.state
        with state.lock:
            state.reset()

    def configure(self, **faults: Any) -> None:
        """Change fault settings while the server runs."""
        state = self._server.state
        with state.lock:
            state.config.update(faults)
            if "seed" in faults:
                state.random = random.Random(state.config.seed)

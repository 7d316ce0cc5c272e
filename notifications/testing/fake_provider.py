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

import io
import json
import random
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from email.utils import formatdate
from typing import Any, cast

from weave.testing.fake_http import FakeHandler, FakeHTTPServer, FakeService, update_settings


@dataclass
class FaultConfig:
    """What the fake does to each push request. Rates are probabilities in [0, 1], drawn in this order."""

    latency_ms: int = 0  # added before answering every push request
    rate_429: float = 0.0
    retry_after: str = "1"  # seconds, or "date:<seconds>" to send an HTTP-date that many seconds ahead
    rate_5xx: float = 0.0
    status_5xx: int = 503
    # Answer status_5xx to the first request of every n-th new key (0: off): a deterministic "1 key in n"
    # temporary failure whose retry then succeeds, for latency measurements with no randomness.
    first_5xx_every: int = 0
    # Answer status_5xx to the first request of each of these idempotency keys: failures bound to given
    # messages, whatever order their requests reach the fake in (concurrent requests arrive shuffled).
    first_5xx_keys: tuple[str, ...] = ()
    rate_hang: float = 0.0  # deliver, then answer only after hang_seconds (past the client's timeout)
    hang_seconds: float = 5.0
    rate_drop: float = 0.0  # deliver, then close the connection without an answer
    force_status: int | None = None  # answer every push with this status (e.g. 400, 404, 410, 408)
    malformed: bool = False  # answer 200 with a body that is not JSON
    token: str | None = None  # when set, any other bearer token gets 401
    seed: int | None = None
    # --- hostile answers: whatever status is answered, the body/headers can be made hostile ---
    # "nul": NUL bytes, control characters and a forged log line; "binary": bytes that are not UTF-8;
    # "huge": `huge_bytes` of filler, streamed; "echo": the request's headers (Authorization included)
    # and the URL it was sent to, as a careless gateway's error page would.
    body_mode: str = ""
    huge_bytes: int = 50 * 1024 * 1024
    # "headers": the status line, then the headers one byte every `trickle_interval` s;
    # "body": the headers at once, then the body one byte at a time. Either lasts about `trickle_seconds`.
    trickle: str = ""
    trickle_interval: float = 0.1
    trickle_seconds: float = 6.0
    # Answer every push with `redirect_status` and this Location (never a delivery).
    redirect_to: str = ""
    redirect_status: int = 307
    # Send `retry_after` with 503 answers too (forced or drawn), as an overloaded service does.
    retry_after_on_503: bool = False
    # --- answers out of turn: what a client must never read as the next request's answer ---------------
    extra_answers: int = 0  # write each answer this many more times, in the same write
    # Answer from the head alone, then take the body for a new request and refuse it (400), in one write.
    early_answer: bool = False
    # Declare a Content-Length this many bytes off the body: negative leaves the tail on the wire,
    # positive promises bytes that never come (the connection is then closed).
    content_length_delta: int = 0
    # An idle keep-alive connection gets an unsolicited 408 and a close after this many seconds (0: off).
    idle_408_seconds: float = 0.0
    # Lost before delivery: hang (then answer 503) or drop the connection BEFORE delivering.
    rate_hang_before: float = 0.0
    rate_drop_before: float = 0.0
    # Echo each push request's Idempotency-Key in its answer, as a gateway that binds answers to requests
    # does (the client then keeps the connection); False: a gateway that does not (one exchange each).
    echo_key: bool = True

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
        # Hostile answers the client stopped reading before the end (a trickle or a huge body cut short).
        self.aborted = 0
        self.completed_hostile = 0
        self.bytes_sent = 0
        self.unsolicited = 0  # 408s written on idle connections

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "unique_deliveries": len(self.delivered),
            "duplicates": self.requests - len(self.per_key),
            "per_key": dict(self.per_key),
            "delivered_keys": sorted(self.delivered),
            "delivered_ids": dict(self.delivered),  # idempotency key -> the message id answered for it
            "unsolicited": self.unsolicited,
            "by_status": dict(self.by_status),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "aborted": self.aborted,
            "completed_hostile": self.completed_hostile,
            "bytes_sent": self.bytes_sent,
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
        path = self.path.rstrip("/")
        state = self.server.state
        if path not in ("/_reset", "/_config") and state.config.early_answer:
            self._early()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
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

    def handle_one_request(self) -> None:
        """One request; with `idle_408_seconds`, an idle connection gets an unsolicited 408 and a close."""
        idle = self.server.state.config.idle_408_seconds
        if idle <= 0:
            super().handle_one_request()
            return
        self.connection.settimeout(idle)
        try:
            peeked = cast(io.BufferedReader, self.rfile).peek(1)
        except TimeoutError:
            peeked = b""
            try:
                self.wfile.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                self.wfile.flush()
                with self.server.state.lock:
                    self.server.state.unsolicited += 1
            except OSError:
                pass
        finally:
            self.connection.settimeout(None)
        if not peeked:
            self.close_connection = True
            return
        super().handle_one_request()

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
            if after in ("drop", "drop before"):
                self.close_connection = True
                return
            if after == "hang":
                time.sleep(config.hang_seconds)
            if config.trickle or (config.body_mode == "huge"):
                self._respond_hostile(config, status, extra_headers, payload)
            else:
                self._respond(status, extra_headers, payload)
        finally:
            with state.lock:
                state.in_flight -= 1

    def _decide(
        self, config: FaultConfig, draw: float, key: str, auth: str, raw: bytes
    ) -> tuple[int, dict[str, str], bytes, str]:
        """Return (status, headers, body, after) for one push; `after` is "", "hang" or "drop"."""
        refused, to = _refusal(config, key, auth, raw)
        if refused is not None:
            return refused
        if config.redirect_to:
            body = self._hostile_body(config, b"moved")
            return config.redirect_status, {"Location": config.redirect_to}, body, ""
        if config.force_status is not None and not 200 <= config.force_status < 300:
            body = self._hostile_body(config, _dumps({"error": f"forced {config.force_status}"}))
            return config.force_status, self._unavailable_headers(config, config.force_status), body, ""
        fault = _drawn_fault(config, draw)
        if fault == "429":
            return 429, {"Retry-After": _retry_after(config.retry_after)}, _dumps({"error": "slow down"}), ""
        if fault == "5xx" or self._fails_first_try(config, key):
            headers = self._unavailable_headers(config, config.status_5xx)
            return config.status_5xx, headers, _dumps({"error": "provider trouble"}), ""
        if fault == "hang before":
            time.sleep(config.hang_seconds)  # long past the client's timeout; nothing was delivered
            return 503, {}, _dumps({"error": "hung before delivering"}), "hang before"
        if fault == "drop before":
            return 0, {}, b"", "drop before"
        after = fault  # "hang", "drop" (after delivering) or ""
        message_id, duplicate = self._deliver(key, to)
        if config.malformed:
            return 200, {}, b"<html>ok</html>", after
        return 200, {}, self._hostile_body(config, _dumps({"id": message_id, "duplicate": duplicate})), after

    def _unavailable_headers(self, config: FaultConfig, status: int) -> dict[str, str]:
        if status == 503 and config.retry_after_on_503:
            return {"Retry-After": _retry_after(config.retry_after)}
        return {}

    def _hostile_body(self, config: FaultConfig, normal: bytes) -> bytes:
        """The body `body_mode` asks for ("huge" is streamed by `_respond_hostile`, not built here)."""
        if config.body_mode == "nul":
            return b'{"error": "bad\x00token\x00"}\x00\r\nevent=completed job=notification id=1\x1b[31m'
        if config.body_mode == "binary":
            return bytes(range(256)) + b"\xff\xfe\xc3\x28\xed\xa0\x80"
        if config.body_mode == "echo":
            headers = "".join(f"{name}: {value}\n" for name, value in self.headers.items())
            host = self.headers.get("Host", "")
            return f"Unauthorized. You sent POST http://{host}{self.path}\n{headers}".encode()
        return normal

    def _fails_first_try(self, config: FaultConfig, key: str) -> bool:
        """Whether this key's first request gets a 5xx: every `first_5xx_every`th new key, or a listed one."""
        if config.first_5xx_every <= 0 and not config.first_5xx_keys:
            return False
        state = self.server.state
        with state.lock:
            if state.per_key.get(key) != 1:
                return False  # not this key's first request
            if config.first_5xx_keys:
                return key in config.first_5xx_keys
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
        config = self.server.state.config
        delta = config.content_length_delta if self.path.rstrip("/") not in _CONTROL else 0
        extra = config.extra_answers if self.path.rstrip("/") not in _CONTROL else 0
        key = self.headers.get("Idempotency-Key", "")
        if config.echo_key and key and self.path.rstrip("/") not in _CONTROL:
            headers = {**headers, "Idempotency-Key": key}
        answer = _answer(status, headers, payload, declared=max(0, len(payload) + delta))
        try:
            self.wfile.write(answer * (1 + max(0, extra)))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): expected for hangs
        if delta > 0:
            self.close_connection = True  # the promised bytes never come

    def _early(self) -> None:
        """Answer 202 from the head alone, then read the body as a request of its own and refuse it."""
        state = self.server.state
        key = self.headers.get("Idempotency-Key", "")
        with state.lock:
            state.requests += 1
            state.per_key[key] = state.per_key.get(key, 0) + 1
            state.by_status["202"] = state.by_status.get("202", 0) + 1
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            to = json.loads(raw)["to"]
        except (ValueError, KeyError, TypeError):
            to = ""
        message_id, duplicate = self._deliver(key, to)
        accepted = _answer(202, {}, _dumps({"id": message_id, "duplicate": duplicate}))
        refused = _answer(400, {"Connection": "close"}, _dumps({"error": "malformed request line"}))
        try:
            self.wfile.write(accepted + refused)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _respond_hostile(self, config: FaultConfig, status: int, headers: dict[str, str], payload: bytes) -> None:
        """Trickle the headers or the body, or stream a huge body; count whether the client hung up first."""
        state = self.server.state
        huge = config.body_mode == "huge"
        length = config.huge_bytes if huge else len(payload)
        head = f"HTTP/1.1 {status} Hostile\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        sent = 0
        try:
            if config.trickle == "headers":
                raw = head.encode()
                step = max(1, len(raw) // max(1, int(config.trickle_seconds / config.trickle_interval)))
                for start in range(0, len(raw), step):
                    self.wfile.write(raw[start : start + step])
                    self.wfile.flush()
                    sent += step
                    time.sleep(config.trickle_interval)
            else:
                self.wfile.write(head.encode())
                self.wfile.flush()
            if huge:
                chunk = b"x" * 65536
                left = length
                while left > 0:
                    piece = chunk[: min(left, len(chunk))]
                    self.wfile.write(piece)
                    sent += len(piece)
                    left -= len(piece)
            elif config.trickle == "body":
                step = max(1, len(payload) // max(1, int(config.trickle_seconds / config.trickle_interval)))
                for start in range(0, len(payload), step):
                    self.wfile.write(payload[start : start + step])
                    self.wfile.flush()
                    sent += step
                    time.sleep(config.trickle_interval)
            else:
                self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with state.lock:
                state.aborted += 1
                state.bytes_sent += sent
            self.close_connection = True
            return
        with state.lock:
            state.completed_hostile += 1
            state.bytes_sent += sent

    def _json(self, status: int, value: Any) -> None:
        self._respond(status, {}, _dumps(value))


_CONTROL = ("/_stats", "/_requests", "/_reset", "/_config")
_REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 408: "Request Timeout", 410: "Gone"}


def _answer(status: int, headers: dict[str, str], payload: bytes, *, declared: int | None = None) -> bytes:
    """One HTTP/1.1 answer on the wire; `declared` is the Content-Length to claim (default: the truth)."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Fake')}", f"Date: {formatdate(usegmt=True)}"]
    lines.append("Content-Type: application/json")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(payload) if declared is None else declared}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


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


def _refusal(
    config: FaultConfig, key: str, auth: str, raw: bytes
) -> tuple[tuple[int, dict[str, str], bytes, str] | None, Any]:
    """(the 401 or 400 answer, None) for a request a real provider refuses; (None, its `to`) otherwise."""
    if config.token is not None and auth != f"Bearer {config.token}":
        return (401, {}, _dumps({"error": "invalid credentials"}), ""), None
    if not key:
        return (400, {}, _dumps({"error": "Idempotency-Key header is required"}), ""), None
    try:
        return None, json.loads(raw)["to"]
    except (ValueError, KeyError, TypeError):
        return (400, {}, _dumps({"error": "body must be a JSON object with 'to'"}), ""), None


_FAULTS = ("429", "5xx", "hang before", "drop before", "hang", "drop")


def _drawn_fault(config: FaultConfig, draw: float) -> str:
    """The fault a draw in [0, 1) falls on, the rates stacked in the order of `_FAULTS`; "" for none."""
    rates = (
        config.rate_429,
        config.rate_5xx,
        config.rate_hang_before,
        config.rate_drop_before,
        config.rate_hang,
        config.rate_drop,
    )
    edge = 0.0
    for fault, rate in zip(_FAULTS, rates, strict=True):
        edge += rate
        if draw < edge:
            return fault
    return ""

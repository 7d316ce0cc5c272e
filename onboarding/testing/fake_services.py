"""A fake supplier-services API: a real HTTP server with faults, dedup and stats.

Tests start it in a thread on port 0; `manage.py fake_supplier_services` runs it standalone.

Endpoints (all POST with a JSON body and an `Idempotency-Key` header):

- `/tax-ids/verify`      `{"country", "tax_id"}` -> 200 `{"valid": bool, "reason": str}`
- `/sanctions/screen`    `{"name", "country"}`   -> 200 `{"hit": bool, "list": str, "reason": str}`
- `/bank-accounts`       `{"holder", "iban"}`    -> 201 `{"reference": str, "last4": str, "status": "verified"}`
                                                    422 when the IBAN is unusable

Like a real registry, the fake checks a tax id's checksum (python-stdnum, via onboarding.validation)
and answers a malformed one `valid: false`; `invalid_tax_ids` are well-formed numbers it does not
know ("not registered"). An IBAN in `refused_ibans` is well-formed but refused (account closed);
a malformed one is refused as unverifiable.

A request whose key was already answered gets the stored answer again (`Idempotent-Replayed: true`)
without doing the work twice. Control endpoints: `GET /_stats`, `POST /_reset` (forget keys and
counts), `POST /_config` (merge a JSON object into the configuration).

Faults, drawn per request from a seeded generator: `error_rate` (503), `throttle_rate` (429 with
`Retry-After`), `hang_rate` (do the work and store it, then hang for `hang_seconds` before
answering: the client times out not knowing the work was done). `latency` delays every request.
`hold(endpoint)` lets a test stop the next request(s) to an endpoint until it releases them.

Hostile answers: `mode` names one of `MODES`, given to a `mode_rate` share of the requests (to
`mode_endpoints` only, when set; drawn from its own generator so the other faults keep their seeds):

- `nul_json`:        a refusal whose strings hold NUL, a lone surrogate and a forged log line
- `binary`:          200 `application/json` whose body is NUL bytes and invalid UTF-8
- `html`:            200 `text/html`: a maintenance page
- `redirect`:        302 to `redirect_to` (with a password in its userinfo)
- `echo`:            401 echoing the request's headers, `Authorization` included
- `huge`:            200 `application/json` of `huge_bytes` bytes and no length, until the client hangs up
- `trickle_headers`: the status line, then one header byte per `trickle_interval`, never finishing
- `trickle_body`:    headers, then one body byte per `trickle_interval` for `trickle_seconds`
"""

import hashlib
import json
import random
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from onboarding.validation import clean_iban, clean_supplier_fields
from weave.testing.fake_http import FakeHandler, FakeHTTPServer, FakeService, update_settings

ENDPOINTS = ("/tax-ids/verify", "/sanctions/screen", "/bank-accounts")
MODES = ("nul_json", "binary", "html", "redirect", "echo", "huge", "trickle_headers", "trickle_body")
# NUL, a lone surrogate, invalid-in-a-log newline: every way a string can hurt a table or a log line.
POISON = "refused\x00 \ud800 here\nevent=completed job=onboarding id=1"


@dataclass
class FakeConfig:
    """What the fake answers and how badly it behaves."""

    latency: float = 0.0  # seconds added to every request
    error_rate: float = 0.0  # share of requests answered 503
    throttle_rate: float = 0.0  # share answered 429 with Retry-After
    retry_after: int = 1  # seconds, sent with every 429
    hang_rate: float = 0.0  # share that do the work, then hang past the client's timeout
    hang_seconds: float = 30.0
    mode: str = ""  # one of MODES: a hostile answer (see the module docstring)
    mode_rate: float = 1.0  # share of requests that get it
    mode_endpoints: list[str] = field(default_factory=list)  # empty: every endpoint
    redirect_to: str = "http://admin:hunter2@moved.example/v2"
    huge_bytes: int = 300 * 1024 * 1024
    trickle_interval: float = 0.05
    trickle_seconds: float = 30.0
    # Answer the next `fail_first` requests 503 with `Retry-After: retry_after`, then behave (a short outage).
    fail_first: int = 0
    invalid_tax_ids: list[str] = field(default_factory=list)  # well-formed, but not registered
    refused_ibans: list[str] = field(default_factory=list)  # well-formed, but the account is closed
    sanctioned_names: list[str] = field(default_factory=list)
    seed: int | None = None

    def update(self, changes: dict[str, Any]) -> None:
        update_settings(self, changes)
        if self.mode and self.mode not in MODES:
            bad, self.mode = self.mode, ""
            raise ValueError(f"unknown mode {bad!r}; known: {', '.join(MODES)}")


class Hold:
    """Requests to one endpoint wait here until the test calls `release()`."""

    def __init__(self, count: int) -> None:
        self.remaining = count
        self.arrived = threading.Event()
        self.released = threading.Event()

    def release(self) -> None:
        self.released.set()


class _State:
    def __init__(self, config: FakeConfig) -> None:
        self.lock = threading.Lock()
        self.config = config
        self.random = random.Random(config.seed)
        self.mode_random = random.Random(config.seed)
        self.holds: dict[str, Hold] = {}
        self.stopping = threading.Event()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.requests = 0
            self.replays = 0
            self.faults: Counter[str] = Counter()
            self.by_endpoint: dict[str, Counter[str]] = {e: Counter() for e in ENDPOINTS}
            self.key_requests: Counter[str] = Counter()
            # key -> (endpoint, status, body): the stored answer a repeated key gets again.
            self.answers: dict[str, tuple[str, int, dict[str, Any]]] = {}

    def stats(self) -> dict[str, Any]:
        with self.lock:
            endpoints = {}
            for name, counts in self.by_endpoint.items():
                unique = sum(1 for endpoint, _, _ in self.answers.values() if endpoint == name)
                endpoints[name] = {
                    "requests": counts["requests"],
                    "unique_keys": unique,
                    "replays": counts["replays"],
                    "faults": counts["faults"],
                }
            return {
                "requests": self.requests,
                "unique_keys": len(self.answers),
                "replays": self.replays,
                "faults": dict(self.faults),
                "endpoints": endpoints,
                "keys": dict(self.key_requests),
            }


def _is_sanctioned(name: str, config: FakeConfig) -> bool:
    wanted = name.casefold().strip()
    return any(wanted == listed.casefold().strip() for listed in config.sanctioned_names)


def _answer(endpoint: str, body: dict[str, Any], config: FakeConfig) -> tuple[int, dict[str, Any]]:
    """The business answer of one endpoint: what a real service would decide."""
    if endpoint == "/tax-ids/verify":
        tax_id = str(body.get("tax_id", "")).strip()
        if not tax_id or not body.get("country"):
            return 400, {"error": "tax_id and country are required"}
        if tax_id in config.invalid_tax_ids:
            return 200, {"valid": False, "reason": f"tax id {tax_id} is not registered"}
        try:
            clean_supplier_fields(country=str(body["country"]), tax_id=tax_id, fields=("country", "tax_id"))
        except ValidationError as exc:
            return 200, {"valid": False, "reason": f"tax id {tax_id!r} is malformed: {'; '.join(exc.messages)}"}
        return 200, {"valid": True, "reason": ""}
    if endpoint == "/sanctions/screen":
        name = str(body.get("name", ""))
        if not name.strip():
            return 400, {"error": "name is required"}
        if _is_sanctioned(name, config):
            return 200, {"hit": True, "list": "FAKE-CONSOLIDATED", "reason": f"{name} matches a sanctions entry"}
        return 200, {"hit": False, "list": "FAKE-CONSOLIDATED", "reason": ""}
    # /bank-accounts
    iban = str(body.get("iban", "")).replace(" ", "").upper()
    try:
        clean_iban(iban)
    except ValidationError:
        return 422, {"error": f"IBAN {iban!r} cannot be verified"}
    if iban in {i.replace(" ", "").upper() for i in config.refused_ibans}:
        return 422, {"error": f"the account behind IBAN {iban} is closed"}
    reference = "ba_" + hashlib.sha256(f"{body.get('holder')}|{iban}".encode()).hexdigest()[:16]
    return 201, {"reference": reference, "last4": iban[-4:], "status": "verified"}


def _drawn_fault(draw: float, config: FakeConfig) -> str | None:
    """The injected fault a request's draw falls on ("5xx", "429", "hang"), or None."""
    if draw < config.error_rate:
        return "5xx"
    if draw < config.error_rate + config.throttle_rate:
        return "429"
    if draw < config.error_rate + config.throttle_rate + config.hang_rate:
        return "hang"
    return None


class _Handler(FakeHandler):
    server: "_Server"

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); what happened is in the stats

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return None
        return body if isinstance(body, dict) else None

    def do_GET(self) -> None:
        if self.path == "/_stats":
            self._send(200, self.server.state.stats())
        elif self.path == "/_health":
            self._send(200, {"ok": True})
        else:
            self._send(404, {"error": f"no such endpoint {self.path}"})

    def do_POST(self) -> None:
        state = self.server.state
        body = self._body()
        if self.path == "/_reset":
            state.reset()
            self._send(200, {"ok": True})
            return
        if self.path == "/_config":
            try:
                with state.lock:
                    state.config.update(body or {})
                    if "seed" in (body or {}):
                        state.random.seed(state.config.seed)
            except ValueError as exc:
                self._send(400, {"error": str(exc)})
                return
            self._send(200, asdict(state.config))
            return
        if self.path not in ENDPOINTS:
            self._send(404, {"error": f"no such endpoint {self.path}"})
            return
        self._serve(self.path, body)

    def _serve(self, endpoint: str, body: dict[str, Any] | None) -> None:
        state = self.server.state
        key = self.headers.get("Idempotency-Key", "").strip()
        config, draw, hold = self._arrive(endpoint, key)
        if config.latency:
            state.stopping.wait(config.latency)
        if hold is not None:
            hold.arrived.set()
            hold.released.wait(60)  # bounded: a forgotten hold must not hang a test run forever
        if not key:
            self._send(400, {"error": "Idempotency-Key header is required"})
            return
        if body is None:
            self._send(400, {"error": "body must be a JSON object"})
            return
        mode = self._mode(endpoint)
        if mode:
            self._count_fault(mode, endpoint)
            self._hostile(mode, endpoint)
            return
        if self._outage(config):
            return
        # One draw decides the fault, so the rates add up the way the flags read.
        fault = _drawn_fault(draw, config)
        if fault in ("5xx", "429"):
            self._count_fault(fault, endpoint)
            if fault == "5xx":
                self._send(503, {"error": "service unavailable (injected)"})
            else:
                self._send(429, {"error": "slow down (injected)"}, {"Retry-After": str(config.retry_after)})
            return
        self._answer_once(endpoint, key, body, config, hang=fault == "hang")

    def _arrive(self, endpoint: str, key: str) -> tuple[FakeConfig, float, Hold | None]:
        """Count the request and take its draw and its hold (if a test holds this endpoint)."""
        state = self.server.state
        with state.lock:
            state.requests += 1
            state.by_endpoint[endpoint]["requests"] += 1
            if key:
                state.key_requests[key] += 1
            draw = state.random.random()
            hold = state.holds.get(endpoint)
            if hold is not None:
                hold.remaining -= 1
                if hold.remaining <= 0:
                    del state.holds[endpoint]
            return state.config, draw, hold

    def _count_fault(self, fault: str, endpoint: str) -> None:
        state = self.server.state
        with state.lock:
            state.faults[fault] += 1
            state.by_endpoint[endpoint]["faults"] += 1

    def _outage(self, config: FakeConfig) -> bool:
        """Answer 503 while the configured outage lasts (`fail_first` requests); say whether it did."""
        state = self.server.state
        with state.lock:
            outage = state.config.fail_first > 0
            if outage:
                state.config.fail_first -= 1
        if outage:
            with state.lock:
                state.faults["outage"] += 1
            self._send(503, {"error": "service unavailable (outage)"}, {"Retry-After": str(config.retry_after)})
        return outage

    def _answer_once(self, endpoint: str, key: str, body: dict[str, Any], config: FakeConfig, *, hang: bool) -> None:
        """Do the work once per idempotency key; a request with a known key gets the stored answer again."""
        state = self.server.state
        with state.lock:
            stored = state.answers.get(key)
            replayed = stored is not None
            if stored is not None:
                state.replays += 1
                state.by_endpoint[endpoint]["replays"] += 1
            else:
                status, answer = _answer(endpoint, body, config)
                # Only answers a retry must not redo are kept; a 400 is the client's mistake.
                if status < 400 or status == 422:
                    state.answers[key] = (endpoint, status, answer)
                stored = (endpoint, status, answer)
            if hang:
                state.faults["hang"] += 1
                state.by_endpoint[endpoint]["faults"] += 1
        _, status, answer = stored
        if hang:
            # The work is done and stored; the client times out and must retry with the same key.
            state.stopping.wait(config.hang_seconds)
        self._send(status, answer, {"Idempotent-Replayed": "true"} if replayed else {})

    # --- hostile answers ---------------------------------------------------------------------------

    def _mode(self, endpoint: str) -> str:
        state = self.server.state
        with state.lock:
            config = state.config
            if not config.mode or (config.mode_endpoints and endpoint not in config.mode_endpoints):
                return ""
            return config.mode if state.mode_random.random() < config.mode_rate else ""

    def _raw(self, data: bytes) -> bool:
        """Write bytes as they are; False once the client has hung up."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            return False
        return True

    def _hostile(self, mode: str, endpoint: str) -> None:
        self.close_connection = True  # never reuse a connection after a hostile answer
        answer = {
            "nul_json": self._nul_json,
            "binary": self._binary,
            "html": self._html,
            "redirect": self._redirect,
            "echo": self._echo,
            "huge": self._huge,
            "trickle_headers": self._trickle_headers,
            "trickle_body": self._trickle_body,
        }.get(mode)
        if answer is not None:
            answer(endpoint)

    def _nul_json(self, endpoint: str) -> None:
        refusals: dict[str, tuple[int, dict[str, Any]]] = {
            "/tax-ids/verify": (200, {"valid": False, "reason": POISON}),
            "/sanctions/screen": (200, {"hit": True, "list": POISON, "reason": POISON}),
            "/bank-accounts": (422, {"error": POISON}),
        }
        self._send(*refusals[endpoint])

    def _binary(self, endpoint: str) -> None:
        self._send_bytes(200, b'\x00\xff\xfe{"valid": \x00true\xc3\x28}\x00', "application/json")

    def _html(self, endpoint: str) -> None:
        page = b"<html><body><h1>Down for maintenance</h1><p>Back soon.</p></body></html>"
        self._send_bytes(200, page, "text/html; charset=utf-8")

    def _redirect(self, endpoint: str) -> None:
        self._send_bytes(302, b"", "text/plain", {"Location": self.server.state.config.redirect_to})

    def _echo(self, endpoint: str) -> None:
        # Credentials first, as a careless error page would print them.
        ordered = sorted(self.headers.items(), key=lambda item: item[0].lower() != "authorization")
        echoed = "".join(f"{name}: {value}\n" for name, value in ordered)
        self._send_bytes(401, f"unauthorized; you sent:\n{echoed}".encode(), "text/plain")

    def _huge(self, endpoint: str) -> None:
        config, stopping = self.server.state.config, self.server.state.stopping
        self._raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        chunk = b" " * 65536
        left = config.huge_bytes
        while left > 0 and not stopping.is_set() and self._raw(chunk[: min(left, len(chunk))]):
            left -= len(chunk)

    def _trickle_headers(self, endpoint: str) -> None:
        config, stopping = self.server.state.config, self.server.state.stopping
        if not self._raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: "):
            return
        ends = time.monotonic() + config.trickle_seconds
        while time.monotonic() < ends and not stopping.wait(config.trickle_interval) and self._raw(b"a"):
            pass

    def _trickle_body(self, endpoint: str) -> None:
        config, stopping = self.server.state.config, self.server.state.stopping
        body = b'{"valid": true, "reason": ""}' + b" " * 2000
        self._raw(
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        ends = time.monotonic() + config.trickle_seconds
        for i in range(len(body)):
            if time.monotonic() >= ends or stopping.wait(config.trickle_interval) or not self._raw(body[i : i + 1]):
                break

    def _send_bytes(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


class _Server(FakeHTTPServer):
    def __init__(self, address: tuple[str, int], state: _State) -> None:
        self.state = state
        super().__init__(address, _Handler)


class FakeSupplierServices(FakeService[_Server]):
    """Run the fake in a background thread: `with FakeSupplierServices() as fake: fake.url`."""

    thread_name = "fake-supplier-services"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, config: FakeConfig | None = None) -> None:
        self.state = _State(config or FakeConfig())
        super().__init__(_Server((host, port), self.state))

    @property
    def config(self) -> FakeConfig:
        return self.state.config

    def before_stop(self) -> None:
        self.state.stopping.set()
        for hold in list(self.state.holds.values()):
            hold.release()

    def stats(self) -> dict[str, Any]:
        """Return the same JSON `GET /_stats` returns."""
        return self.state.stats()

    def reset(self) -> None:
        """Forget every key, answer and count."""
        self.state.reset()

    def hold(self, endpoint: str, count: int = 1) -> Hold:
        """Make the next `count` requests to `endpoint` wait until the returned hold is released."""
        if endpoint not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint}")
        hold = Hold(count)
        with self.state.lock:
            self.state.holds[endpoint] = hold
        return hold

"""A local stand-in for the APNs provider API: HTTP/2 only, over TLS with a test CA, ES256 provider tokens.

    keys = TestKeys.create(tmp_path)
    with FakeAPNs(keys) as apns:
        options = {"team_id": APNS_TEAM_ID, "key_id": APNS_KEY_ID, "key_file": str(keys.apns_key_file),
                   "topic": APNS_TOPIC, "host": apns.host_port, "ca_file": str(keys.ca_file)}

What it checks, like Apple does (answers carry Apple's own `reason` strings):
- HTTP/2: a request over HTTP/1.1 is refused (ALPN offers only h2; a client that ignores it gets 505).
- `POST /3/device/<hex token>` with `authorization: bearer <JWT>`: ES256, `kid` = the key id, `iss` =
  the team id, `iat` no older than an hour (ExpiredProviderToken), a valid signature
  (InvalidProviderToken), and no more than one new token per `min_token_interval` seconds
  (TooManyProviderTokenUpdates): a client must reuse its token.
- Headers: `apns-topic` (MissingTopic / TopicDisallowed), `apns-push-type`, `apns-priority` (1, 5, 10),
  `apns-expiration` (an integer), `apns-collapse-id` (at most 64 bytes), `apns-id` (a lower-case UUID).
- The payload: JSON with an `aps` dictionary, at most 4 KB (PayloadTooLarge).
- Success is 200 with an empty body and the `apns-id` echoed.
- Live Activities: the `liveactivity` push type and its payload, sends on broadcast channels and the
  channel management API (`fake_apns_live`); `live_refusals` says what its checks refused.

Token behaviour: a token that is not hex is BadDeviceToken; tokens starting `dead` (hex `dead...`) or passed
to `unregister()` are 410 Unregistered with a timestamp; tokens starting `0ff1ce` belong to another app
(DeviceTokenNotForTopic); `live_token()` makes a random token that starts with neither. Faults add
TooManyRequests, InternalServerError, ServiceUnavailable, ExpiredProviderToken and hangs.
"""

import asyncio
import json
import re
import secrets
import threading
import time
import uuid
from typing import Any

import jwt

from notifications.testing.asgi_fake import AsgiApp, HypercornFake, Request, Response
from notifications.testing.fake_apns_live import BROADCAST, MANAGE, FakeLiveActivities
from notifications.testing.fake_state import (
    Delivery,
    FakeState,
    Faults,
    LostBeforeDelivery,
    ProviderFake,
    apply_latency,
    hostile_body,
    pick_error,
    retry_after_value,
)
from notifications.testing.keys import APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC, TestKeys

_PATH_RE = re.compile(r"^/3/device/([^/]+)$")
_HEX_RE = re.compile(r"^[0-9a-fA-F]{64,200}$")
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PUSH_TYPES = {"alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity",
              "pushtotalk", "widgets"}  # fmt: skip

# reason -> HTTP status, as Apple documents them.
REASONS: dict[str, int] = {
    "BadCollapseId": 400,
    "BadDeviceToken": 400,
    "BadExpirationDate": 400,
    "BadMessageId": 400,
    "BadPriority": 400,
    "BadTopic": 400,
    "DeviceTokenNotForTopic": 400,
    "InvalidPushType": 400,
    "MissingDeviceToken": 400,
    "MissingTopic": 400,
    "PayloadEmpty": 400,
    "TopicDisallowed": 400,
    "ExpiredProviderToken": 403,
    "InvalidProviderToken": 403,
    "MissingProviderToken": 403,
    "BadPath": 404,
    "MethodNotAllowed": 405,
    "Unregistered": 410,
    "PayloadTooLarge": 413,
    "TooManyProviderTokenUpdates": 429,
    "TooManyRequests": 429,
    "InternalServerError": 500,
    "ServiceUnavailable": 503,
    "Shutdown": 503,
}


class FakeAPNs(ProviderFake):
    """The APNs fake. `issued_tokens` counts distinct provider JWTs seen (a client should reuse one)."""

    def __init__(
        self,
        keys: TestKeys,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        team_id: str = APNS_TEAM_ID,
        key_id: str = APNS_KEY_ID,
        topic: str = APNS_TOPIC,
        min_token_interval: float = 0.0,
        **faults: Any,
    ) -> None:
        self.keys = keys
        self.team_id = team_id
        self.key_id = key_id
        self.topic = topic
        # Apple refuses a new provider token more often than every 20 minutes; tests set a shorter bound.
        self.min_token_interval = min_token_interval
        self.state = FakeState(Faults(**faults))
        self._lock = threading.Lock()
        self.provider_tokens: dict[str, float] = {}  # JWT -> when first seen
        self.expired: set[str] = set()  # provider tokens to answer ExpiredProviderToken for
        self.dead: dict[str, int] = {}  # token -> unregistered at (ms)
        # Live Activity payload rules, broadcast channels and their management API (fake_apns_live).
        self.live = FakeLiveActivities(topic=topic, state=self.state)
        self.server = HypercornFake(
            AsgiApp(self._handle), host=host, port=port, certfile=keys.server_cert, keyfile=keys.server_key,
            alpn=("h2",),
        )  # fmt: skip

    # --- control -----------------------------------------------------------------------------------

    @property
    def host_port(self) -> str:
        """What goes into the backend's `host` option."""
        return f"{self.server.host}:{self.server.port}"

    def reset(self) -> None:
        super().reset()
        self.live.reset()
        with self._lock:
            self.provider_tokens.clear()

    @property
    def live_refusals(self) -> list[str]:
        """What the Live Activity checks refused, in words, oldest first."""
        with self.live.lock:
            return list(self.live.live_refusals)

    def stats(self) -> dict[str, Any]:
        snapshot = self.state.snapshot()
        with self._lock:
            snapshot["provider_tokens"] = len(self.provider_tokens)
        return snapshot

    def deliveries(self) -> list[Delivery]:
        with self.state.lock:
            return list(self.state.deliveries)

    def unregister(self, token: str) -> None:
        with self._lock:
            self.dead[token.lower()] = int(time.time() * 1000)

    def expire_provider_tokens(self) -> None:
        """Treat every provider token issued until now as older than an hour (ExpiredProviderToken)."""
        with self._lock:
            self.expired |= set(self.provider_tokens)

    # --- the endpoint -----------------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        if request.method == "GET" and request.path == "/_stats":
            return Response.json(200, self.stats())  # for a fake in another process (the demo, the chaos run)
        faults, draw = self.state.begin(request.http_version, request.client)
        try:
            response = await self._answer(request, faults, draw)
        except LostBeforeDelivery:
            self.state.end(503, "lost")
            return _reason("ServiceUnavailable")
        reason = json.loads(response.body).get("reason", "") if response.body else ""
        self.state.end(response.status, reason)
        return hostile_body(faults, response, request.headers, f"{self.url}{request.path}")

    async def _answer(self, request: Request, faults: Faults, draw: float) -> Response:
        if request.http_version != "2":
            return Response(505, b"", {})  # APNs speaks HTTP/2 only
        if (other := await self._other_path(request)) is not None:
            return other
        token, payload, refused = self._request_refusal(request)
        if refused:
            return _reason(refused)
        hang = await apply_latency(faults, draw)
        if error := pick_error(faults, draw, self.state.pop_script()):
            response = _reason(error)
            if faults.retry_after and response.status in (429, 503):
                response.headers["retry-after"] = retry_after_value(faults.retry_after)
            return response
        if (refusal := self._token_refusal(token)) is not None:
            return refusal
        apns_id = request.headers.get("apns-id") or str(uuid.uuid4())
        self.state.deliver(
            Delivery(
                token=token,
                collapse=request.headers.get("apns-collapse-id", ""),
                message=payload,
                headers=dict(request.headers),
            )
        )
        if hang:
            await asyncio.sleep(faults.hang_seconds)
        return Response(200, b"", {"apns-id": apns_id, "apns-unique-id": str(uuid.uuid4())})

    def _request_refusal(self, request: Request) -> tuple[str, dict[str, Any], str]:
        """(the path's token, the payload, the reason APNs refuses the request with, "" when it does not)."""
        match = _PATH_RE.match(request.path)
        if not match:
            return "", {}, "BadPath"
        if request.method != "POST":
            return "", {}, "MethodNotAllowed"
        token = match.group(1).lower()
        if refused := self._check_provider_token(request.headers.get("authorization", "")):
            return token, {}, refused
        if refused := self._check_headers(request.headers):
            return token, {}, refused
        payload, refused = _payload(request.body)
        if refused or (refused := _check_aps(payload["aps"], request.headers)):
            return token, payload, refused
        return token, payload, self.live.device_problem(request.headers, payload["aps"])

    def _token_refusal(self, token: str) -> Response | None:
        """Apple's answer for a token it does not deliver to (malformed, unregistered, another app's), or None."""
        if not _HEX_RE.match(token):
            return _reason("BadDeviceToken")
        with self._lock:
            dead_at = self.dead.get(token)
        if dead_at is None and token.startswith("dead"):
            dead_at = int(time.time() * 1000) - 60_000
        if dead_at is not None:
            return _reason("Unregistered", timestamp=dead_at)
        if token.startswith("0ff1ce"):
            return _reason("DeviceTokenNotForTopic")
        return None

    async def _other_path(self, request: Request) -> Response | None:
        """A broadcast or a channel management call (under the same provider token), or None for a device path."""
        broadcast, manage = BROADCAST.match(request.path), MANAGE.match(request.path)
        if broadcast is None and manage is None:
            return None
        if refused := self._check_provider_token(request.headers.get("authorization", "")):
            return _reason(refused)
        if broadcast is not None:
            return self.live.broadcast(request, broadcast.group(1))
        assert manage is not None
        return self.live.manage(request, manage.group(1), manage.group(2))

    def _check_provider_token(self, authorization: str) -> str:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "MissingProviderToken"
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(
                token,
                self.keys.apns_public_key_pem,
                algorithms=["ES256"],
                issuer=self.team_id,
                options={"require": ["iat", "iss"], "verify_iat": False},
            )
        except jwt.PyJWTError:
            return "InvalidProviderToken"
        if header.get("kid") != self.key_id or header.get("alg") != "ES256":
            return "InvalidProviderToken"
        now = time.time()
        issued = float(claims["iat"])
        with self._lock:
            expired = token in self.expired
        if issued < now - 3600 or expired:
            return "ExpiredProviderToken"
        if issued > now + 60:
            return "InvalidProviderToken"
        with self._lock:
            if token not in self.provider_tokens:
                latest = max(self.provider_tokens.values(), default=None)
                if latest is not None and now - latest < self.min_token_interval:
                    return "TooManyProviderTokenUpdates"
                self.provider_tokens[token] = now
        return ""

    def _check_headers(self, headers: dict[str, str]) -> str:
        topic = headers.get("apns-topic")
        if not topic:
            return "MissingTopic"
        if topic.removesuffix(".push-type.liveactivity") != self.topic:
            return "TopicDisallowed"  # the suffix itself is checked against the push type (fake_apns_live)
        if headers.get("apns-push-type", "alert") not in PUSH_TYPES:
            return "InvalidPushType"
        if headers.get("apns-priority", "10") not in ("1", "5", "10"):
            return "BadPriority"
        if not re.fullmatch(r"\d{1,12}", headers.get("apns-expiration", "0")):
            return "BadExpirationDate"
        if len(headers.get("apns-collapse-id", "").encode()) > 64:
            return "BadCollapseId"
        if "apns-id" in headers and not _UUID_RE.match(headers["apns-id"]):
            return "BadMessageId"
        return ""


def live_token() -> str:
    """A random device token this fake delivers to.

    A random 64-digit hex token starts with `dead` once in 65,536 draws, and the fake then answers
    Unregistered: a suite drawing thousands of tokens failed now and then for it. Starting with `a`
    rules out both prefixes the fake gives a meaning to."""
    return "a" + secrets.token_hex(32)[1:]


def _payload(body: bytes) -> tuple[dict[str, Any], str]:
    """The notification's JSON payload, or the reason Apple refuses it with."""
    if not body:
        return {}, "PayloadEmpty"
    if len(body) > 4096:
        return {}, "PayloadTooLarge"
    try:
        payload = json.loads(body)
    except ValueError:
        return {}, "PayloadEmpty"
    if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
        return {}, "PayloadEmpty"
    return payload, ""


# Apple's documented aps keys: anything else is refused here (a typo in a site's raw aps merge shows up in tests).
APS_KEYS = frozenset(
    "alert badge sound thread-id category content-available mutable-content target-content-id "
    "interruption-level relevance-score filter-criteria stale-date content-state timestamp event "
    "dismissal-date attributes-type attributes input-push-token input-push-channel".split()
)


def _check_aps(aps: dict[str, Any], headers: dict[str, str]) -> str:
    if set(aps) - APS_KEYS:
        return "BadPayload"
    background = headers.get("apns-push-type") == "background"
    if background and headers.get("apns-priority", "10") != "5":
        return "BadPriority"  # Apple: background pushes must use priority 5
    if background and ("alert" in aps or aps.get("content-available") != 1):
        return "BadPayload"
    return ""


def _reason(reason: str, *, timestamp: int | None = None) -> Response:
    body: dict[str, Any] = {"reason": reason}
    if timestamp is not None:
        body["timestamp"] = timestamp
    return Response.json(REASONS.get(reason, 400), body)

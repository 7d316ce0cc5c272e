"""A local push service for Web Push: VAPID (RFC 8292) checked, every payload decrypted (RFC 8291).

    keys = TestKeys.create(tmp_path)
    with FakeWebPush(keys) as push:
        subscription = push.subscription("alice-laptop")   # what a browser would hand the site
        token = subscription.as_token()                      # stored as the Device token
        ...
        push.plaintexts()                                    # what the browser's service worker would read

Subscription keys are derived from the subscription id and a secret, so a fake in another process
(`make run`, the chaos run) and the code that registers devices agree on them without sharing state.

What it checks: `vapid t=<JWT>,k=<key>` with an ES256 signature by `k`, `aud` = this server's origin,
`exp` in the future and at most 24 h ahead, `sub` a mailto: or https: URL, and `k` equal to the site's
VAPID key when the fake knows it; `TTL` present (RFC 8030 makes it mandatory), `Content-Encoding:
aes128gcm`, `Urgency` one of very-low/low/normal/high, `Topic` at most 32 base64url characters, a body of
at most 4,096 bytes that decrypts with the subscription's private key and auth secret. Success is 201.
Subscriptions whose id starts with `gone-` answer 410, `expired-` answer 404 (or `unsubscribe()` them).
"""

import asyncio
import hashlib
import json
import re
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notifications.testing.asgi_fake import AsgiApp, HypercornFake, Request, Response
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
from notifications.testing.keys import TestKeys, WebPushSubscription, b64url, b64url_decode

_PATH_RE = re.compile(r"^/wp/([A-Za-z0-9_.\-]{1,100})$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9_\-]{1,32}$")
URGENCIES = ("very-low", "low", "normal", "high")
DEFAULT_SECRET = b"weave fake web push"

# error name -> status; the fake's faults use these names.
ERRORS = {"TooManyRequests": 429, "InternalServerError": 500, "ServiceUnavailable": 503, "Gone": 410}


def derive_subscription(base_url: str, sub_id: str, secret: bytes = DEFAULT_SECRET) -> WebPushSubscription:
    """The subscription a browser would have for `sub_id` at the fake push service at `base_url`."""
    seed = hashlib.sha256(secret + b"/key/" + sub_id.encode()).digest()
    # Any integer in [1, n) is a P-256 private key; a SHA-256 value is below n with overwhelming odds.
    key = ec.derive_private_key(int.from_bytes(seed, "big") % (2**255) + 1, ec.SECP256R1())
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    auth = hashlib.sha256(secret + b"/auth/" + sub_id.encode()).digest()[:16]
    return WebPushSubscription(
        endpoint=f"{base_url}/wp/{sub_id}", p256dh=b64url(point), auth=b64url(auth), private_key=key
    )


class FakeWebPush(ProviderFake):
    """The Web Push fake. `plaintexts()` returns every decrypted payload, in arrival order."""

    def __init__(
        self,
        keys: TestKeys | None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        secret: bytes = DEFAULT_SECRET,
        tls: bool = True,
        **faults: Any,
    ) -> None:
        self.keys = keys
        self.secret = secret
        self.state = FakeState(Faults(**faults))
        self._lock = threading.Lock()
        self.gone: set[str] = set()
        self.refusals: list[str] = []
        self.vapid_key = b64url(_raw_point(keys.vapid_public_key_pem)) if keys is not None else None
        self.server = HypercornFake(
            AsgiApp(self._handle),
            host=host,
            port=port,
            certfile=keys.server_cert if keys is not None and tls else None,
            keyfile=keys.server_key if keys is not None and tls else None,
        )

    # --- control -----------------------------------------------------------------------------------

    def subscription(self, sub_id: str) -> WebPushSubscription:
        return derive_subscription(self.url, sub_id, self.secret)

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self.refusals = []

    def stats(self) -> dict[str, Any]:
        snapshot = self.state.snapshot()
        with self._lock:
            snapshot["refusals"] = list(self.refusals)
        return snapshot

    def deliveries(self) -> list[Delivery]:
        with self.state.lock:
            return list(self.state.deliveries)

    def plaintexts(self) -> list[dict[str, Any]]:
        return [delivery.message for delivery in self.deliveries()]

    def declarative(self) -> list[dict[str, Any]]:
        """The payloads a browser would show itself (declarative push messages), in arrival order."""
        return [message for message in self.plaintexts() if "web_push" in message]

    def unsubscribe(self, sub_id: str) -> None:
        """The browser dropped this subscription: 410 Gone from now on."""
        with self._lock:
            self.gone.add(sub_id)

    # --- the endpoint -----------------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        if request.method == "GET" and request.path == "/_stats":
            return Response.json(200, self.stats())  # for a fake in another process (the demo, the chaos run)
        faults, draw = self.state.begin(request.http_version, request.client)
        try:
            response = await self._answer(request, faults, draw)
        except LostBeforeDelivery:
            self.state.end(503, "lost")
            return _error(503, "lost before delivery")
        if response.status >= 400:
            with self._lock:
                self.refusals.append(response.body.decode(errors="replace")[:200])
        self.state.end(response.status, str(response.status) if response.status >= 400 else "")
        return hostile_body(faults, response, request.headers, f"{self.url}{request.path}")

    async def _answer(self, request: Request, faults: Faults, draw: float) -> Response:
        match = _PATH_RE.match(request.path)
        if request.method != "POST" or not match:
            return _error(404, "No such subscription endpoint.")
        sub_id = match.group(1)
        if refused := self._check_vapid(request.headers.get("authorization", "")):
            return _error(403 if "key" in refused else 401, refused)
        headers = request.headers
        if bad_request := _refused_headers(request):
            return bad_request
        hang = await apply_latency(faults, draw)
        if error := pick_error(faults, draw, self.state.pop_script()):
            response = _error(ERRORS.get(error, 500), error)
            if faults.retry_after and response.status in (429, 503):
                response.headers["retry-after"] = retry_after_value(faults.retry_after)
            return response
        if ended := self._ended(sub_id):
            return ended
        try:
            message = self._decrypted(sub_id, request.body)
        except Exception as exc:  # noqa: BLE001  any failure to decrypt is the client's encryption bug
            return _error(400, f"The payload does not decrypt with the subscription's keys: {exc!r}")
        self.state.deliver(
            Delivery(token=sub_id, collapse=headers.get("topic", ""), message=message, headers=dict(headers))
        )
        if hang:
            await asyncio.sleep(faults.hang_seconds)
        return Response(201, b"", {"location": f"{self.url}/m/{uuid.uuid4().hex}"})

    def _ended(self, sub_id: str) -> Response | None:
        """The answer for a subscription that was unsubscribed (410) or has expired (404), else None."""
        with self._lock:
            gone = sub_id in self.gone
        if gone or sub_id.startswith("gone-"):
            return _error(410, "The subscription has been unsubscribed.")
        if sub_id.startswith("expired-"):
            return _error(404, "The subscription has expired.")
        return None

    def _decrypted(self, sub_id: str, body: bytes) -> dict[str, Any]:
        """The message a body carries, decrypted with the subscription's keys ({} for an empty body)."""
        subscription = self.subscription(sub_id)
        if not body:
            return {}
        plaintext = http_ece.decrypt(
            body,
            private_key=subscription.private_key,
            auth_secret=b64url_decode(subscription.auth),
            version="aes128gcm",
        )
        message: dict[str, Any] = json.loads(plaintext)
        return message

    def _check_vapid(self, authorization: str) -> str:
        scheme, _, rest = authorization.partition(" ")
        if scheme.lower() != "vapid":
            return "VAPID authorization (vapid t=..., k=...) is required."
        parts = dict(part.strip().split("=", 1) for part in rest.split(",") if "=" in part)
        token, key = parts.get("t", ""), parts.get("k", "")
        try:
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(key))
            claims = jwt.decode(
                token,
                public,
                algorithms=["ES256"],
                audience=_origin(self.url),
                options={"require": ["exp", "aud", "sub"]},
            )
        except (jwt.PyJWTError, ValueError) as exc:
            return f"The VAPID token does not verify: {exc}"
        if float(claims["exp"]) > time.time() + 24 * 3600 + 60:
            return "The VAPID token's exp is more than 24 hours ahead."
        if not str(claims["sub"]).startswith(("mailto:", "https:")):
            return "The VAPID sub must be a mailto: or https: URL."
        if self.vapid_key is not None and key != self.vapid_key:
            return "The VAPID key is not the application server key this subscription was created with."
        return ""


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _raw_point(public_pem: bytes) -> bytes:
    key = serialization.load_pem_public_key(public_pem)
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def _error(status: int, message: str) -> Response:
    return Response.json(status, {"code": status, "errno": status, "error": message, "message": message})


_DECLARATIVE_STRINGS = ("title", "body", "lang", "tag", "navigate", "image", "icon", "badge")
_DECLARATIVE_FLAGS = ("renotify", "silent", "require_interaction")


def declarative_problem(message: Any) -> str:
    """Why a browser's declarative push message parser would not take `message` ("" when it would).

    What the Push API's parser asks: `web_push` is 8030, `notification` an object with a `title` string and
    a `navigate` URL, the other members of their types, `app_badge` an unsigned integer, `mutable` a boolean.
    A browser falls back to the service worker for a message it cannot parse."""
    if not isinstance(message, dict) or message.get("web_push") != 8030:
        return "web_push is not 8030"
    notification = message.get("notification")
    if not isinstance(notification, dict):
        return "notification is not an object"
    return _notification_problem(notification) or _message_problem(message)


def _notification_problem(notification: dict[str, Any]) -> str:
    if not isinstance(notification.get("title"), str):
        return "notification.title is not a string"
    if not str(notification.get("navigate", "")).startswith("https://"):
        return "notification.navigate is not an https URL"
    wrong = [key for key in _DECLARATIVE_STRINGS if not isinstance(notification.get(key, ""), str)]
    wrong += [key for key in _DECLARATIVE_FLAGS if not isinstance(notification.get(key, False), bool)]
    if wrong:
        return f"notification.{wrong[0]} is not of its type"
    if notification.get("dir", "auto") not in ("auto", "ltr", "rtl"):
        return "notification.dir is not auto, ltr or rtl"
    actions = notification.get("actions", [])
    if not all(isinstance(a, dict) and {"action", "title", "navigate"} <= set(a) for a in actions):
        return "an action lacks action, title or navigate"
    return ""


def _message_problem(message: dict[str, Any]) -> str:
    badge = message.get("app_badge", 0)
    if isinstance(badge, bool) or not isinstance(badge, int) or badge < 0:
        return "app_badge is not an unsigned integer"
    if not isinstance(message.get("mutable", False), bool):
        return "mutable is not a boolean"
    return ""


def _refused_headers(request: Request) -> Response | None:
    """The 4xx a push service gives a request whose headers or body size break RFC 8030, else None."""
    headers = request.headers
    if not re.fullmatch(r"\d{1,10}", headers.get("ttl", "")):
        return _error(400, "The TTL header is required (RFC 8030 section 5.2).")
    if headers.get("urgency", "normal") not in URGENCIES:
        return _error(400, f"Urgency must be one of {', '.join(URGENCIES)}.")
    if "topic" in headers and not _TOPIC_RE.match(headers["topic"]):
        return _error(400, "Topic must be at most 32 characters of the URL-safe base64 alphabet.")
    if len(request.body) > 4096:
        return _error(413, "Payload too large (at most 4096 bytes).")
    if request.body and headers.get("content-encoding") != "aes128gcm":
        return _error(415, "Content-Encoding must be aes128gcm (RFC 8188).")
    return None

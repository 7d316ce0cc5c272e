"""Web Push: RFC 8030 delivery, RFC 8291 message encryption (aes128gcm), RFC 8292 VAPID.

    "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend",
                "OPTIONS": {"vapid_private_key_file": "/etc/secrets/vapid.pem",
                            "vapid_subject": "mailto:ops@example.com",
                            "ca_file": None}}          # optional: trust only this CA (local fakes)

The device token is the browser's subscription as JSON (`PushSubscription.toJSON()`):
`{"endpoint": "https://...", "keys": {"p256dh": "...", "auth": "..."}}`, plus `"declarative": true`
when the page registered it from a browser that shows declarative push messages itself. The payload is
JSON `{"title", "body", "data", "tag"}` (`tag` for the service worker's `showNotification`), or, for a
message with the `webpush.declarative` option and a subscription that can take it, a declarative push
message (`{"web_push": 8030, "notification": {...}}`); either is encrypted for that subscription only,
and the push service cannot read it.

The token is user input: it is stored as canonical compact JSON (`canonical_token`), its endpoint must
pass the destination policy (`notifications.backends.destinations`, docs/devices.md) at registration and
at each send, and the client connects only to addresses that policy checked.
"""

import base64
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar
from urllib.parse import urlsplit

import http_ece
import httpx
from cryptography.hazmat.primitives.asymmetric import ec

from notifications import content
from notifications.backends import classify
from notifications.backends.base import Outcome, Priority, PushBackend, PushMessage, SendResult, TokenError
from notifications.backends.credentials import VapidSigner, shared, tls_context
from notifications.backends.destinations import (
    DestinationRefused,
    Endpoint,
    GuardedNetworkBackend,
    GuardedTransport,
    allowed_hosts,
    check_endpoint,
    is_known_host,
    loopback_allowed,
    refusal_in,
)
from notifications.backends.h2transport import H2Client
from notifications.backends.http import CappedResponse, ExchangeFailed, capped_request, json_body
from notifications.backends.options import (
    expired_before_sending,
    missing,
    ttl_to_send,
    unknown,
    unreadable,
    web_push_topic,
)
from weave.edge import HttpClass, http_class

OPTIONS = {"vapid_private_key_file", "vapid_subject", "ca_file"}
# Request fields whose value differs per message (kept out of HPACK's table, see H2Client).
WEBPUSH_VOLATILE = frozenset({b":path", b"topic", b"ttl"})
SUBSCRIPTIONS_KEPT = 4096  # checked subscriptions a backend remembers (see WebPushBackend._target)
DEFAULT_TTL = 28 * 24 * 3600  # what FCM keeps a message for; a push service may store less


class SubscriptionError(TokenError):
    pass


class EndpointRefused(SubscriptionError):
    """The subscription is well formed, but its endpoint is outside the destination policy."""


_SHAPE = 'A Web Push token is the subscription JSON {"endpoint": ..., "keys": {"p256dh": ..., "auth": ...}}.'
_B64URL = re.compile(r"[A-Za-z0-9_\-]+={0,2}")
SUBSCRIPTION_INPUT_MAX = 16 * 1024  # characters of JSON as handed over, before it is made compact


@dataclass(frozen=True)
class Subscription:
    """A browser's push subscription, checked: where it goes and the keys its messages are encrypted for."""

    endpoint: Endpoint
    p256dh: bytes  # the browser's P-256 public key, an uncompressed point (65 bytes, 0x04 first)
    auth: bytes  # the 16-byte auth secret
    # The browser said, when it registered, that it shows declarative push messages itself.
    declarative: bool = False

    def as_token(self) -> str:
        """The canonical token: compact JSON, keys in a fixed order, base64url without padding; then
        `"declarative": true` when the browser registered the subscription as able to take them."""
        keys = {"p256dh": _b64encode(self.p256dh), "auth": _b64encode(self.auth)}
        token: dict[str, Any] = {"endpoint": self.endpoint.url, "keys": keys}
        if self.declarative:
            token["declarative"] = True
        return json.dumps(token, separators=(",", ":"))


@dataclass(frozen=True)
class _Target:
    """A checked subscription with what every send to it derives from it, worked out once (see `_target`)."""

    subscription: Subscription
    where: str  # the endpoint's host[:port], as reasons name it
    verbatim: bool  # whether the destination policy's host list names the host (answers kept as they came)


def subscription(token: str) -> Subscription:
    """Parse and check a subscription JSON (PushSubscription.toJSON(), pretty-printed or not); raise
    SubscriptionError naming what is wrong. The endpoint passes the destination policy (no DNS here)."""
    if not isinstance(token, str) or len(token) > SUBSCRIPTION_INPUT_MAX:
        raise SubscriptionError(_SHAPE)
    try:
        info = json.loads(token)
        endpoint, keys = info["endpoint"], info["keys"]
        p256dh, auth = _b64(keys["p256dh"]), _b64(keys["auth"])
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise SubscriptionError(_SHAPE) from exc
    if len(p256dh) != 65 or p256dh[0] != 4:
        raise SubscriptionError("The subscription's p256dh key must be an uncompressed P-256 point (65 bytes).")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p256dh)
    except ValueError as exc:
        raise SubscriptionError("The subscription's p256dh key is not a point on the P-256 curve.") from exc
    if len(auth) != 16:
        raise SubscriptionError("The subscription's auth secret must be 16 bytes.")
    try:
        checked = check_endpoint(endpoint)
    except DestinationRefused as exc:
        raise EndpointRefused(str(exc)) from exc
    # Only a literal true counts: anything else a client sends there is dropped, as other members are.
    return Subscription(endpoint=checked, p256dh=p256dh, auth=auth, declarative=info.get("declarative") is True)


def origin_of(url: str) -> str:
    """Return `scheme://host:port` of `url`, the port spelled out, the host lower-case, no userinfo."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or (443 if scheme == "https" else 80)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def _b64(text: Any) -> bytes:
    if not isinstance(text, str) or not _B64URL.fullmatch(text):
        raise TypeError("a key must be base64url text")
    return base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class WebPushBackend(PushBackend):
    """Encrypt each message for its subscription and POST it to the subscription's push service."""

    supports_http2: ClassVar[bool] = True

    def __init__(self, *, alias: str, options: Mapping[str, Any], timeout: float, concurrency: int) -> None:
        super().__init__(alias=alias, options=options, timeout=timeout, concurrency=concurrency)
        self.ca_file: str | None = options.get("ca_file")
        self._targets: dict[tuple[str, bool, tuple[str, ...]], _Target] = {}
        self._scopes: dict[str, str] = {}  # token -> its breaker scope (see breaker_scope)
        self.vapid = _vapid_signer(options)

    @classmethod
    def prepare(cls, options: Mapping[str, Any], *, timeout: float) -> None:
        """Load the VAPID key now, off the first drain's path (each origin's header is signed on first use)."""
        _vapid_signer(options)

    @classmethod
    def check_options(cls, alias: str, options: Mapping[str, Any]) -> list[str]:
        problems = [*unknown(options, OPTIONS), *missing(options, "vapid_private_key_file", "vapid_subject")]
        problems += unreadable(options, "vapid_private_key_file", "ca_file")
        subject = options.get("vapid_subject")
        if subject and not str(subject).startswith(("mailto:", "https://")):
            problems.append("OPTIONS['vapid_subject'] must be a mailto: or https:// URL (RFC 8292).")
        return problems

    @classmethod
    def canonical_token(cls, token: str) -> str:
        """Return the subscription as canonical compact JSON; refuse it unless its keys and endpoint check out."""
        return subscription(token).as_token()

    @classmethod
    def token_aliases(cls, token: str) -> tuple[str, ...]:
        """The same subscription registered with the other declarative flag: one browser, one device."""
        checked = subscription(token)
        return (replace(checked, declarative=not checked.declarative).as_token(),)

    def breaker_scope(self, message: PushMessage) -> str:
        """The endpoint's origin (scheme://host:port): each push service is stopped on its own.

        Read from the stored subscription as it is, without the destination policy: a refused endpoint
        ends its own row before any send, and its scope must still be its own."""
        scope = self._scopes.get(message.token)
        if scope is None:
            # Remembered per token (the worker asks for every row, and a drain sends to the same
            # subscriptions again and again): the scope depends on the token alone.
            scope = _scope_of(message.token)
            if len(self._scopes) >= SUBSCRIPTIONS_KEPT:
                self._scopes.clear()
            self._scopes[message.token] = scope
        return scope

    def make_client(self, **extra: Any) -> Any:
        # Every connection opens through the destination policy: the endpoint's host is resolved, each
        # address checked, and only a checked address is connected to (TLS still verifies the host name).
        # HTTP/2 through the lean client; a push service that offers no h2 gets httpx's pool, guarded alike.
        transport = GuardedTransport(verify=tls_context(self.ca_file), max_connections=self.concurrency)
        fallback = super().make_client(transport=transport, **extra)
        if extra:
            return fallback
        client = H2Client(
            verify=tls_context(self.ca_file), connect_timeout=self.timeout,
            resolve=GuardedNetworkBackend().checked_addresses, volatile=WEBPUSH_VOLATILE, streams=self.concurrency,
        )  # fmt: skip
        client.fallback = fallback
        return client

    def _target(self, token: str) -> _Target:
        """`subscription(token)` and what a send derives from it, remembered per token and destination
        policy: a drain sends to the same subscriptions again and again, and what parsing and checking
        one finds depends on the token and the policy alone. The policy's settings are part of the key,
        so a changed host list is applied at the next send (to the check and to whether answers are kept
        verbatim)."""
        key = (token, loopback_allowed(), allowed_hosts())
        target = self._targets.get(key)
        if target is None:
            checked = subscription(token)  # a refusal raises, and is never remembered
            # Answers from a host outside the site's list (a fake on loopback) are never kept verbatim.
            target = _Target(
                subscription=checked, where=urlsplit(checked.endpoint.url).netloc,
                verbatim=is_known_host(checked.endpoint.host),
            )  # fmt: skip
            if len(self._targets) >= SUBSCRIPTIONS_KEPT:
                self._targets.clear()
            self._targets[key] = target
        return target

    async def send(self, message: PushMessage) -> SendResult:
        started = time.monotonic()
        deadline = started + self.timeout
        ttl = ttl_to_send(message)
        if ttl == 0:
            return expired_before_sending(message)
        try:
            target = self._target(message.token)
        except SubscriptionError as exc:
            # Checked again at each send. A malformed subscription is a dead token; an endpoint outside the
            # policy (the host list may have changed since it registered) fails the row but keeps the device.
            return SendResult(
                outcome=Outcome.PERMANENT, reason=f"Not sent: {exc} Nothing was sent.",
                token_invalid=not isinstance(exc, EndpointRefused), sent=False,
            )  # fmt: skip
        checked, where, verbatim = target.subscription, target.where, target.verbatim
        endpoint, p256dh, auth = checked.endpoint.url, checked.p256dh, checked.auth
        key = message.collapse_key or message.idempotency_key
        payload = web_push_payload(message, tag=key, declarative=checked.declarative)
        content = encrypt(payload, p256dh=p256dh, auth=auth)
        headers = {
            "TTL": str(DEFAULT_TTL if ttl is None else ttl),
            "Urgency": "high" if message.priority == Priority.HIGH else "normal",
            # A resend with the same Topic replaces the copy the push service still holds for the browser.
            "Topic": web_push_topic(key),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
        }

        async def credential(refused: str | None) -> str | SendResult:
            try:
                return self.vapid.authorization(endpoint, refused=refused)
            except (ValueError, TypeError, OSError) as exc:
                return SendResult(
                    outcome=Outcome.TEMPORARY, systemic=True, fatal=True, sent=False,
                    reason=f"Could not sign a VAPID token ({type(exc).__name__}); check vapid_private_key_file; "
                    "nothing was sent.",
                )  # fmt: skip

        async def exchange(authorization: str) -> CappedResponse | SendResult:
            try:
                return await capped_request(
                    self.client, "POST", endpoint, deadline=max(0.0, deadline - time.monotonic()),
                    headers={**headers, "Authorization": authorization}, content=content,
                    secrets=_vapid_secrets(authorization),
                )  # fmt: skip
            except ExchangeFailed as exc:
                if (refusal := refusal_in(exc)) is not None:
                    # This endpoint's name resolved to an address the policy refuses: this row waits, the
                    # batch goes on (one user's endpoint says nothing about the other push services).
                    return SendResult(
                        outcome=Outcome.TEMPORARY, latency_ms=exc.latency_ms, sent=False,
                        reason=f"Not sent to {where}: {refusal}; nothing was sent.",
                    )  # fmt: skip
                return classify.failed_exchange(exc, where=where)

        return await self.send_refreshing_once(
            credential,
            exchange,
            refuses=lambda response: response.status in (401, 403),  # re-sign once: nothing was delivered
            classify=lambda response, authorization, again: classify_webpush(
                response, secrets=_vapid_secrets(authorization), where=where, after_refresh=again, verbatim=verbatim
            ),
        )


def _vapid_signer(options: Mapping[str, Any]) -> VapidSigner:
    """The process-wide signer of the VAPID key in `options`: its headers are cached per push-service origin."""
    key_file, subject = str(options["vapid_private_key_file"]), str(options["vapid_subject"])
    return shared(("vapid", key_file, subject), lambda: VapidSigner(private_key_file=key_file, subject=subject))


def _vapid_secrets(authorization: str) -> list[str]:
    """The signed token inside a `vapid t=..., k=...` header: what a reason must never show."""
    return [authorization.split("t=", 1)[-1].split(",", 1)[0]]


def _scope_of(token: str) -> str:
    try:
        endpoint = json.loads(token)["endpoint"]
    except (ValueError, KeyError, TypeError):
        return ""
    return origin_of(endpoint) if isinstance(endpoint, str) else ""


def web_push_payload(message: PushMessage, *, tag: str, declarative: bool = False) -> bytes:
    """The plaintext for one subscription: a declarative push message when the message asks for one and
    the subscription can take it (`declarative`), else the JSON a site's service worker shows."""
    if declarative:
        options = message.options
        made = content.declarative_web_push(
            title=message.title, body=message.body, data=message.data, tag=tag, options=options
        )
        if made is not None:
            return json_body(made)
    shown = content.webpush_fields(title=message.title, body=message.body, options=message.options)
    if not shown and content.is_silent(message.title, message.body):
        # A silent push: nothing for the service worker to show, only data for it to act on.
        return json_body({"data": dict(message.data)})
    payload = {"title": message.title, "body": message.body, "data": dict(message.data), "tag": tag, **shown}
    return json_body(payload)


def encrypt(plaintext: bytes, *, p256dh: bytes, auth: bytes) -> bytes:
    """RFC 8291: aes128gcm content coding with a fresh ephemeral ECDH key and salt per message."""
    ephemeral = ec.generate_private_key(ec.SECP256R1())
    return bytes(
        http_ece.encrypt(
            plaintext, salt=os.urandom(16), private_key=ephemeral, dh=p256dh, auth_secret=auth, version="aes128gcm"
        )  # fmt: skip
    )


def classify_webpush(
    response: CappedResponse,
    *,
    secrets: list[str],
    where: str = "the push service",
    after_refresh: bool = False,
    verbatim: bool = True,
) -> SendResult:
    """Turn a push service's answer into an outcome (RFC 8030 statuses; bodies differ per vendor).

    `verbatim=False` (a host outside the site's list): its body and Location are never kept."""
    status = response.status
    kind = http_class(status)
    base: dict[str, Any] = {"http_status": status, "latency_ms": response.latency_ms}
    if kind == HttpClass.SUCCESS:
        # Nothing of a delivery's body is kept, and its Location (the message's id) only from a known
        # push service: the answer is not read further, nor copied into a withheld one.
        location = response.location(secrets=secrets) if verbatim else ""
        return SendResult(outcome=Outcome.DELIVERED, provider_message_id=location[-200:], **base)
    if not verbatim:
        if kind == HttpClass.REDIRECT:
            return SendResult(
                outcome=Outcome.TEMPORARY, systemic=True, fatal=True, **base,
                reason=f"{where} answered HTTP {status} (a redirect, never followed; its target is not kept: "
                "the host is not a known push service).",
            )  # fmt: skip
        response = withheld(response)
    body = response.snippet(secrets=secrets)
    tail = f": {body}" if body else ""
    if kind == HttpClass.REDIRECT:
        return classify.redirect(response, where=where, secrets=secrets)
    if status in (404, 410):
        why = "was unsubscribed" if status == 410 else "has expired or does not exist"
        return SendResult(
            outcome=Outcome.PERMANENT, reason=f"The Web Push subscription {why} (HTTP {status} from {where}){tail}.",
            token_invalid=True, **base,
        )  # fmt: skip
    if kind == HttpClass.AUTH:
        again = " even after the VAPID token was signed again" if after_refresh else ""
        return SendResult(
            outcome=Outcome.TEMPORARY,
            reason=f"{where} refused our VAPID credentials (HTTP {status}){again}; check vapid_private_key_file "
            f"(the key the subscriptions were created with) and vapid_subject{tail}.",
            systemic=True, fatal=True, **base,
        )  # fmt: skip
    if status == 429:
        return classify.throttled_subscription(response, where=where, secrets=secrets)  # this subscription only
    if kind in (HttpClass.THROTTLED, HttpClass.SERVER, HttpClass.TIMEOUT):
        return classify.throttled_or_unavailable(response, what=f"The push service {where} is busy", secrets=secrets)
    return SendResult(outcome=Outcome.PERMANENT, reason=f"{where} refused the message (HTTP {status}){tail}.", **base)


def withheld(response: CappedResponse) -> CappedResponse:
    """The answer without what its sender chose freely (body, Location): only the status and Retry-After stay."""
    kept = httpx.Headers({k: v for k, v in response.headers.items() if k.lower() in ("retry-after", "date")})
    # In place of the body, our own words on it: that there was one, and whether the cap cut it.
    cut = f"; body cut at {len(response.body)} bytes" if response.truncated else ""
    note = f"[body withheld: not a known push service{cut}]".encode() if response.body else b""
    return replace(response, headers=kept, body=note, truncated=False)

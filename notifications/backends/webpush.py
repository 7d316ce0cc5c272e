"""Web Push: RFC 8030 delivery, RFC 8291 message encryption (aes128gcm), RFC 8292 VAPID.

    "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend",
                "OPTIONS": {"vapid_private_key_file": "/etc/secrets/vapid.pem",
                            "vapid_subject": "mailto:ops@example.com",
                            "ca_file": None}}          # optional: trust only this CA (local fakes)

The device token is the browser's subscription as JSON (`PushSubscription.toJSON()`):
`{"endpoint": "https://...", "keys": {"p256dh": "...", "auth": "..."}}`. The payload is JSON
`{"title", "body", "data", "tag"}` (`tag` for the service worker's `showNotification`), encrypted
for that subscription only; the push service cannot read it.
"""

import json
import os
import time
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

import http_ece
from cryptography.hazmat.primitives.asymmetric import ec

from notifications import content
from notifications.backends import classify
from notifications.backends.base import Outcome, Priority, PushBackend, PushMessage, SendResult
from notifications.backends.credentials import VapidSigner, shared, tls_context
from notifications.backends.http import CappedResponse, ExchangeFailed, capped_request
from notifications.backends.options import (
    expired_before_sending,
    missing,
    ttl_to_send,
    unknown,
    unreadable,
    web_push_topic,
)
from weave.retry import HttpClass, http_class

OPTIONS = {"vapid_private_key_file", "vapid_subject", "ca_file"}
DEFAULT_TTL = 28 * 24 * 3600  # what FCM keeps a message for; a push service may store less


class SubscriptionError(ValueError):
    pass


def parse_subscription(token: str) -> tuple[str, bytes, bytes]:
    """Return (endpoint, p256dh public key, auth secret) from a subscription JSON, or raise SubscriptionError."""
    try:
        info = json.loads(token)
        endpoint, keys = info["endpoint"], info["keys"]
        p256dh, auth = _b64(keys["p256dh"]), _b64(keys["auth"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SubscriptionError(
            'A Web Push token is the subscription JSON {"endpoint": ..., "keys": {"p256dh": ..., "auth": ...}}.'
        ) from exc
    if (
        not isinstance(endpoint, str)
        or urlsplit(endpoint).scheme not in ("https", "http")
        or not urlsplit(endpoint).netloc
    ):
        raise SubscriptionError("The subscription's endpoint must be an https:// URL.")
    if len(p256dh) != 65 or p256dh[0] != 4 or len(auth) != 16:
        raise SubscriptionError("The subscription's keys must be a P-256 point (p256dh) and a 16-byte auth secret.")
    return endpoint, p256dh, auth


def _b64(text: Any) -> bytes:
    import base64

    if not isinstance(text, str):
        raise TypeError("a key must be base64url text")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class WebPushBackend(PushBackend):
    """Encrypt each message for its subscription and POST it to the subscription's push service."""

    supports_http2: ClassVar[bool] = True
    supports_collapse: ClassVar[bool] = True
    supports_expiry: ClassVar[bool] = True

    def __init__(self, *, alias: str, options: Mapping[str, Any], timeout: float, concurrency: int) -> None:
        super().__init__(alias=alias, options=options, timeout=timeout, concurrency=concurrency)
        self.ca_file: str | None = options.get("ca_file")
        key_file, subject = str(options["vapid_private_key_file"]), str(options["vapid_subject"])
        self.vapid = shared(
            ("vapid", key_file, subject), lambda: VapidSigner(private_key_file=key_file, subject=subject)
        )

    @classmethod
    def check_options(cls, alias: str, options: Mapping[str, Any]) -> list[str]:
        problems = [*unknown(options, OPTIONS), *missing(options, "vapid_private_key_file", "vapid_subject")]
        problems += unreadable(options, "vapid_private_key_file", "ca_file")
        subject = options.get("vapid_subject")
        if subject and not str(subject).startswith(("mailto:", "https://")):
            problems.append("OPTIONS['vapid_subject'] must be a mailto: or https:// URL (RFC 8292).")
        return problems

    @classmethod
    def check_token(cls, token: str) -> str:
        try:
            parse_subscription(token)
        except SubscriptionError as exc:
            return str(exc)
        return ""

    def make_client(self, **extra: Any) -> Any:
        return super().make_client(verify=tls_context(self.ca_file), **extra)

    async def send(self, message: PushMessage) -> SendResult:
        started = time.monotonic()
        deadline = started + self.timeout
        ttl = ttl_to_send(message)
        if ttl == 0:
            return expired_before_sending(message)
        try:
            endpoint, p256dh, auth = parse_subscription(message.token)
        except SubscriptionError as exc:
            return SendResult(outcome=Outcome.PERMANENT, reason=f"Not sent: {exc}", token_invalid=True)
        where = urlsplit(endpoint).netloc
        key = message.collapse_key or message.idempotency_key
        content = encrypt(web_push_payload(message, tag=key), p256dh=p256dh, auth=auth)
        headers = {
            "TTL": str(DEFAULT_TTL if ttl is None else ttl),
            "Urgency": "high" if message.priority == Priority.HIGH else "normal",
            # A resend with the same Topic replaces the copy the push service still holds for the browser.
            "Topic": web_push_topic(key),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
        }
        refused: str | None = None
        for attempt in (1, 2):
            authorization = self.vapid.authorization(endpoint, refused=refused)
            secrets = [authorization.split("t=", 1)[-1].split(",", 1)[0]]
            try:
                response = await capped_request(
                    self.client, "POST", endpoint, deadline=max(0.0, deadline - time.monotonic()),
                    headers={**headers, "Authorization": authorization}, content=content, secrets=secrets,
                )  # fmt: skip
            except ExchangeFailed as exc:
                return classify.failed_exchange(exc, where=where)
            if attempt == 1 and response.status in (401, 403):
                refused = authorization  # re-sign the VAPID token once: nothing was delivered
                continue
            return classify_webpush(response, secrets=secrets, where=where, after_refresh=attempt == 2)
        raise AssertionError("unreachable")  # pragma: no cover


def web_push_payload(message: PushMessage, *, tag: str) -> bytes:
    shown = content.webpush_fields(title=message.title, body=message.body, options=message.options)
    if not shown and content.is_silent(message.title, message.body):
        # A silent push: nothing for the service worker to show, only data for it to act on.
        return json.dumps({"data": dict(message.data)}, separators=(",", ":"), ensure_ascii=False).encode()
    payload = {"title": message.title, "body": message.body, "data": dict(message.data), "tag": tag, **shown}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def encrypt(plaintext: bytes, *, p256dh: bytes, auth: bytes) -> bytes:
    """RFC 8291: aes128gcm content coding with a fresh ephemeral ECDH key and salt per message."""
    ephemeral = ec.generate_private_key(ec.SECP256R1())
    return bytes(
        http_ece.encrypt(
            plaintext, salt=os.urandom(16), private_key=ephemeral, dh=p256dh, auth_secret=auth, version="aes128gcm"
        )  # fmt: skip
    )


def classify_webpush(
    response: CappedResponse, *, secrets: list[str], where: str = "the push service", after_refresh: bool = False
) -> SendResult:
    """Turn a push service's answer into an outcome (RFC 8030 statuses; bodies differ per vendor)."""
    status = response.status
    kind = http_class(status)
    base: dict[str, Any] = {"http_status": status, "latency_ms": response.latency_ms}
    body = response.snippet(secrets=secrets)
    tail = f": {body}" if body else ""
    if kind == HttpClass.SUCCESS:
        location = response.location(secrets=secrets)
        return SendResult(outcome=Outcome.DELIVERED, provider_message_id=location[-200:], **base)
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
    if kind in (HttpClass.THROTTLED, HttpClass.SERVER, HttpClass.TIMEOUT):
        return classify.throttled_or_unavailable(response, what=f"The push service {where} is busy", secrets=secrets)
    return SendResult(outcome=Outcome.PERMANENT, reason=f"{where} refused the message (HTTP {status}){tail}.", **base)

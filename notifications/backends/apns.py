"""Apple Push Notification service, provider API with token (JWT) auth, HTTP/2 only.

    "apns": {"BACKEND": "notifications.backends.apns.APNsBackend",
             "OPTIONS": {"team_id": "ABCDE12345", "key_id": "KEY1234567", "key_file": "/etc/secrets/AuthKey.p8",
                         "topic": "com.example.app",
                         "host": "api.push.apple.com",   # api.sandbox.push.apple.com for development builds
                         "ca_file": None,                # optional: trust only this CA (local fakes)
                         "push_type": "alert"}}          # optional

`POST https://{host}/3/device/{token}` with `apns-topic`, `apns-push-type`, `apns-priority`,
`apns-expiration`, `apns-collapse-id` and `apns-id` (the notification's idempotency key). A 200 has an
empty body; errors carry Apple's `reason` string, which decides the outcome.
"""

import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from notifications import content, live_content
from notifications.backends import classify
from notifications.backends.base import Outcome, Priority, PushBackend, PushMessage, SendResult, TokenError
from notifications.backends.credentials import APNsProviderToken, shared, tls_context
from notifications.backends.h2transport import H2Client
from notifications.backends.http import CappedResponse, ExchangeFailed, capped_request, json_body
from notifications.backends.options import expired_before_sending, missing, short_key, ttl_to_send, unknown, unreadable
from weave.edge import HttpClass, http_class, outside_text

# manage_host: the broadcast channel management API (notifications.backends.apns_channels); not used to send.
OPTIONS = {"team_id", "key_id", "key_file", "topic", "host", "ca_file", "push_type", "token_lifetime", "manage_host"}
# Request fields whose value differs per notification (kept out of HPACK's table, see H2Client).
APNS_VOLATILE = frozenset({b":path", b"apns-id", b"apns-collapse-id", b"apns-expiration"})
_HEX = re.compile(r"[0-9a-f]{64,200}")

# Apple's reasons that concern one device token: the device must be deactivated.
TOKEN_REASONS = {"Unregistered", "BadDeviceToken", "DeviceTokenNotForTopic"}
# Our provider token: replace it once and send again, then stop the batch.
AUTH_REASONS = {"ExpiredProviderToken", "InvalidProviderToken", "MissingProviderToken"}
# Configuration that no message can get past (wrong topic, certificate, path): stop the batch.
CONFIG_REASONS = {"MissingTopic", "TopicDisallowed", "BadTopic", "BadCertificate", "BadCertificateEnvironment",
                  "Forbidden", "BadPath", "MethodNotAllowed", "FeatureNotEnabled", "TopicMismatch"}  # fmt: skip
SERVER_REASONS = {"InternalServerError", "ServiceUnavailable", "Shutdown"}
# Broadcast answers about the one channel a row names.
CHANNEL_REASONS = {
    "ChannelNotRegistered": "the broadcast channel does not exist (deleted, or made in the other environment)",
    "BadChannelId": "the broadcast channel id is not valid base64 or is too long",
    "MissingChannelId": "the broadcast had no channel id",
    "BadExpirationDate": "the expiration was refused (a No Message Stored channel takes only a message without ttl)",
}


class APNsBackend(PushBackend):
    """Send to APNs over HTTP/2 with an ES256 provider token that is reused for 20-50 minutes.

    Live Activity messages (the `live_activity` option) go to Live Activity tokens through the same
    `/3/device/` path under the `<topic>.push-type.liveactivity` topic, or to a broadcast channel
    (`channel:<id>`) through `/4/broadcasts/apps/<topic>`; see `notifications.live_content`."""

    supports_http2: ClassVar[bool] = True
    target_only_prefixes: ClassVar[tuple[str, ...]] = (live_content.CHANNEL_PREFIX,)

    def __init__(self, *, alias: str, options: Mapping[str, Any], timeout: float, concurrency: int) -> None:
        super().__init__(alias=alias, options=options, timeout=timeout, concurrency=concurrency)
        self.topic: str = options["topic"]
        self.host: str = options.get("host") or "api.push.apple.com"
        self.base_url = f"https://{self.host}"
        self.ca_file: str | None = options.get("ca_file")
        self.push_type: str = options.get("push_type") or "alert"
        self.provider_token = _provider_token(options)

    @classmethod
    def prepare(cls, options: Mapping[str, Any], *, timeout: float) -> None:
        """Sign the provider token now, off the first drain's path (it loads the key and signs, on the CPU)."""
        _provider_token(options).get()

    @classmethod
    def check_options(cls, alias: str, options: Mapping[str, Any]) -> list[str]:
        problems = [*unknown(options, OPTIONS), *missing(options, "team_id", "key_id", "key_file", "topic")]
        problems += unreadable(options, "key_file", "ca_file")
        if not problems:
            try:
                from cryptography.hazmat.primitives.asymmetric import ec
                from cryptography.hazmat.primitives.serialization import load_pem_private_key

                with open(options["key_file"], "rb") as handle:
                    key = load_pem_private_key(handle.read(), password=None)
                if not isinstance(key, ec.EllipticCurvePrivateKey):
                    problems.append("OPTIONS['key_file'] is not an EC (P-256) key, as Apple's .p8 keys are.")
            except (OSError, ValueError, TypeError) as exc:
                problems.append(f"OPTIONS['key_file'] is not a PEM private key ({type(exc).__name__}).")
        return problems

    @classmethod
    def canonical_token(cls, token: str) -> str:
        """Return the token as lower-case hex: 32 to 100 bytes, so 64 to 200 hex digits, an even count.

        A Live Activity token keeps its prefix and name (`liveactivity:<activity>:<hex>`,
        `liveactivity-start:<AttributesType>:<hex>`); a channel target is `channel:<base64 id>`."""
        kind = live_content.token_kind(token)
        if kind == "channel":
            channel = token.removeprefix(live_content.CHANNEL_PREFIX)
            if not live_content.CHANNEL_ID.fullmatch(channel):
                raise TokenError("An APNs broadcast channel id is base64 text.")
            return token
        prefix, name, hex_token = "", "", token
        if kind != "device":
            prefix, name, hex_token = (token.split(":", 2) + ["", ""])[:3]
            pattern = live_content.ACTIVITY if kind == "update" else live_content.ATTRIBUTES_TYPE
            if not pattern.fullmatch(name):
                what = "an activity name (1 to 100 of A-Z a-z 0-9 . _ ~ -)" if kind == "update" else "a Swift type name"
                raise TokenError(f"A Live Activity token is {prefix}:<{what}>:<hex token>.")
            prefix, name = f"{prefix}:", f"{name}:"
        canonical = hex_token.lower()
        if not _HEX.fullmatch(canonical) or len(canonical) % 2:
            raise TokenError(
                "An APNs device token is hexadecimal, 64 to 200 digits (32 to 100 bytes, so an even count)."
            )
        return f"{prefix}{name}{canonical}"

    @classmethod
    def target_problem(cls, token: str, options: Mapping[str, Any]) -> str:
        """Live Activity content only to Live Activity tokens (of its activity or attributes type) or a channel."""
        return live_content.target_problem(token, options)

    def make_client(self, **extra: Any) -> Any:
        # HTTP/2 only, like APNs itself: one connection multiplexes the window, more only where APNs
        # allows fewer streams per connection than the window.
        return H2Client(
            verify=tls_context(self.ca_file), connect_timeout=self.timeout, volatile=APNS_VOLATILE,
            streams=self.concurrency,
        )  # fmt: skip

    def secrets(self) -> list[str]:
        token = self.provider_token.secret()
        return [token] if token else []

    async def send(self, message: PushMessage) -> SendResult:
        started = time.monotonic()
        deadline = started + self.timeout
        ttl = ttl_to_send(message)
        if ttl == 0:
            return expired_before_sending(message)
        url, headers, content = self.request(message, ttl)

        async def credential(refused: str | None) -> str | SendResult:
            try:
                return self.provider_token.get(refused=refused)
            except (ValueError, TypeError, OSError) as exc:  # PyJWTError is a ValueError
                return _not_signed(f"Could not sign an APNs provider token ({type(exc).__name__}); check key_file")

        async def exchange(jwt_token: str) -> CappedResponse | SendResult:
            try:
                return await capped_request(
                    self.client, "POST", url, deadline=max(0.0, deadline - time.monotonic()),
                    headers={**headers, "authorization": f"bearer {jwt_token}"}, content=content, secrets=[jwt_token],
                )  # fmt: skip
            except ExchangeFailed as exc:
                return classify.failed_exchange(exc, where=self.host)

        return await self.send_refreshing_once(
            credential,
            exchange,
            # Nothing was delivered: sign a new provider token once and send again.
            refuses=lambda response: response.status == 403 and apns_reason(response) in AUTH_REASONS,
            classify=lambda response, jwt_token, again: classify_apns(
                response, secrets=[jwt_token], where=self.host, after_refresh=again
            ),
        )

    def request(self, message: PushMessage, ttl: int | None) -> tuple[str, dict[str, str], bytes]:
        """The URL, headers (without authorization) and body for `message`: a device, a Live Activity token
        (its hex part in the path) or a broadcast channel."""
        kind = live_content.token_kind(message.token)
        if kind == "channel":
            headers, body = broadcast_request(message, ttl=ttl)
            return f"{self.base_url}/4/broadcasts/apps/{self.topic}", headers, body
        headers, body = apns_request(message, topic=self.topic, push_type=self.push_type, ttl=ttl)
        return f"{self.base_url}/3/device/{message.token.rsplit(':', 1)[-1]}", headers, body


def _provider_token(options: Mapping[str, Any]) -> APNsProviderToken:
    """The process-wide provider token of the key in `options`: Apple refuses a new one more often than every
    20 minutes, so every sender in the process shares it."""
    team_id, key_id, key_file = str(options["team_id"]), str(options["key_id"]), str(options["key_file"])
    lifetime = float(options.get("token_lifetime") or 40 * 60)
    return shared(
        ("apns", team_id, key_id, key_file),
        lambda: APNsProviderToken(team_id=team_id, key_id=key_id, key_file=key_file, lifetime=lifetime),
    )


def _not_signed(reason: str) -> SendResult:
    """Our own credentials cannot be made: a configuration error that stops the backend; nothing was sent."""
    return SendResult(outcome=Outcome.TEMPORARY, reason=f"{reason}; nothing was sent.", systemic=True, fatal=True,
                      sent=False)  # fmt: skip


def apns_request(message: PushMessage, *, topic: str, push_type: str, ttl: int | None) -> tuple[dict[str, str], bytes]:
    """The headers (without authorization) and JSON payload for `message`."""
    if "live_activity" in message.options:
        return live_activity_request(message, topic=topic, ttl=ttl)
    high = message.priority == Priority.HIGH
    alert = bool(message.title or message.body)
    kind = push_type if alert else "background"
    key = message.collapse_key or message.idempotency_key
    headers = {
        "apns-topic": topic,
        "apns-push-type": kind,
        # Background pushes must use priority 5; an alert at 5 is "normal" (delivered when convenient).
        "apns-priority": "10" if high and kind != "background" else "5",
        # The same id on every attempt: a resend after an unknown outcome is the same notification to
        # APNs, and the collapse id makes the device replace the first copy instead of showing two.
        "apns-id": apns_id(message.idempotency_key),
        "apns-collapse-id": short_key(key, limit=64),
        "content-type": "application/json",
    }
    if ttl is not None:
        headers["apns-expiration"] = str(int(time.time()) + ttl)
    aps = content.apns_aps(title=message.title, body=message.body, options=message.options)
    extra = content.apns_extra(message.options)
    payload = {**{k: v for k, v in message.data.items() if k != "aps"}, **extra, "aps": aps}
    return headers, json_body(payload)


def live_activity_request(message: PushMessage, *, topic: str, ttl: int | None) -> tuple[dict[str, str], bytes]:
    """A Live Activity push to a token: the `.push-type.liveactivity` topic, priority 10 (high) or 5."""
    headers = {
        "apns-topic": f"{topic}.push-type.liveactivity",
        "apns-push-type": "liveactivity",
        # 5 does not count toward the hourly budget iOS gives an app's Live Activity updates.
        "apns-priority": "10" if message.priority == Priority.HIGH else "5",
        "apns-id": apns_id(message.idempotency_key),
        "content-type": "application/json",
    }
    if ttl is not None:
        headers["apns-expiration"] = str(int(time.time()) + ttl)
    return headers, _live_payload(message)


def broadcast_request(message: PushMessage, *, ttl: int | None) -> tuple[dict[str, str], bytes]:
    """A Live Activity push on a broadcast channel. `apns-expiration` is required there: 0 (deliver once,
    store nothing, the only value a No Message Stored channel takes) unless the message has a TTL."""
    headers = {
        "apns-channel-id": message.token.removeprefix(live_content.CHANNEL_PREFIX),
        "apns-push-type": "liveactivity",
        "apns-priority": "10" if message.priority == Priority.HIGH else "5",
        "apns-expiration": "0" if ttl is None else str(int(time.time()) + ttl),
        "apns-request-id": apns_id(message.idempotency_key),
        "content-type": "application/json",
    }
    return headers, _live_payload(message)


def _live_payload(message: PushMessage) -> bytes:
    aps = live_content.live_aps(title=message.title, body=message.body, options=message.options)
    return json_body({**{k: v for k, v in message.data.items() if k != "aps"}, "aps": aps})


def apns_id(key: str) -> str:
    """The canonical lower-case UUID APNs wants: the key itself when it is one, else a stable UUID of it."""
    try:
        return str(uuid.UUID(key))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"weave:{key}"))


def apns_reason(response: CappedResponse) -> str:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return ""
    return str(body.get("reason", "")) if isinstance(body, dict) else ""


def classify_apns(
    response: CappedResponse, *, secrets: list[str], where: str = "APNs", after_refresh: bool = False
) -> SendResult:
    """Turn an APNs answer into an outcome, from Apple's `reason` first and the HTTP status second."""
    status = response.status
    kind = http_class(status)
    base: dict[str, Any] = {"http_status": status, "latency_ms": response.latency_ms}
    if kind == HttpClass.SUCCESS:
        return _delivered(response, secrets, base)
    if kind == HttpClass.REDIRECT:
        return classify.redirect(response, where=where, secrets=secrets)
    reason = outside_text(apns_reason(response), secrets=secrets, limit=80)
    said = reason or response.snippet(secrets=secrets) or f"HTTP {status}"
    answer = _Answer(status, kind, reason, said, base, response)
    for judge in (_dead_token, _too_many_for_one, _channel_refused):
        if (result := judge(answer)) is not None:
            return result
    if reason in AUTH_REASONS or reason in CONFIG_REASONS or status in (403, 404, 405, 505):
        refreshed = " even after a new provider token was signed" if after_refresh and reason in AUTH_REASONS else ""
        return SendResult(
            outcome=Outcome.TEMPORARY,
            reason=f"APNs refused our configuration or provider token: {said} (HTTP {status}){refreshed}. "
            "Check team_id, key_id, key_file, topic and host.",
            systemic=True, fatal=True, **base,
        )  # fmt: skip
    if kind in (HttpClass.THROTTLED, HttpClass.SERVER) or reason in SERVER_REASONS:
        return SendResult(
            outcome=Outcome.TEMPORARY, reason=f"APNs {said} (HTTP {status}{answer.asked}).",
            retry_after=response.retry_after(), systemic=True, **base,
        )  # fmt: skip
    if kind == HttpClass.TIMEOUT:
        return SendResult(outcome=Outcome.TEMPORARY, reason=f"APNs timed out reading the request: {said}.", **base)
    return SendResult(
        outcome=Outcome.PERMANENT, reason=f"APNs refused the notification: {said} (HTTP {status}).", **base
    )


def _delivered(response: CappedResponse, secrets: list[str], base: dict[str, Any]) -> SendResult:
    # A device push echoes its apns-id; a broadcast answers with its apns-unique-id.
    said_id = response.headers.get("apns-id") or response.headers.get("apns-unique-id", "")
    message_id = outside_text(said_id, secrets=secrets, limit=200)
    return SendResult(outcome=Outcome.DELIVERED, provider_message_id=message_id, **base)


@dataclass(frozen=True)
class _Answer:
    """An APNs refusal as the classification reads it."""

    status: int
    kind: HttpClass
    reason: str  # Apple's reason, sanitized
    said: str
    base: dict[str, Any]
    response: CappedResponse

    @property
    def asked(self) -> str:
        retry_after = self.response.retry_after()
        return f", Retry-After {retry_after:g} s" if retry_after is not None else ""


def _dead_token(a: _Answer) -> SendResult | None:
    if a.reason not in TOKEN_REASONS:
        return None
    if a.reason == "Unregistered":
        since = _timestamp(a.response)
        why = "is no longer active for the topic" + (f" (since {since})" if since else "")
    elif a.reason == "BadDeviceToken":
        why = "is not valid (or belongs to the other APNs environment)"
    else:
        why = "belongs to another app (apns-topic)"
    return SendResult(
        outcome=Outcome.PERMANENT, reason=f"APNs {a.reason} (HTTP {a.status}): the device token {why}.",
        token_invalid=True, **a.base,
    )  # fmt: skip


def _too_many_for_one(a: _Answer) -> SendResult | None:
    if a.reason != "TooManyRequests":
        return None
    # Too many pushes to this one device (or channel): back off this row only; the provider is fine for others.
    return SendResult(
        outcome=Outcome.TEMPORARY, reason=f"APNs TooManyRequests (HTTP 429{a.asked}): too many notifications "
        "to this device token; this row waits, the batch goes on.", retry_after=a.response.retry_after(), **a.base,
    )  # fmt: skip


def _channel_refused(a: _Answer) -> SendResult | None:
    """A broadcast refused for its channel: that row fails; no device is behind a channel to deactivate."""
    why = CHANNEL_REASONS.get(a.reason)
    if why is None:
        return None
    return SendResult(outcome=Outcome.PERMANENT, reason=f"APNs {a.reason} (HTTP {a.status}): {why}.", **a.base)


def _timestamp(response: CappedResponse) -> str:
    try:
        millis = int(response.json().get("timestamp"))
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(millis / 1000))

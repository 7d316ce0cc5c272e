"""Firebase Cloud Messaging, HTTP v1 API, over HTTP/2.

    "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend",
            "OPTIONS": {"project_id": "my-app", "credentials_file": "/etc/secrets/fcm.json",
                        "base_url": "https://fcm.googleapis.com",   # optional: emulators and local fakes
                        "ca_file": None,                            # optional: trust only this CA (fakes)
                        "topic_api": "v1",                          # optional: "iid" keeps the legacy batch API
                        "iid_url": "https://iid.googleapis.com"}}   # optional: that API's URL (fakes)

Auth is a service-account OAuth2 access token (see `credentials.GoogleAccessToken`). On a 401 the token
is replaced once and the message sent again (a 401 means nothing was delivered); a second 401 stops
the batch. Answers are classified from FCM's own error JSON (`google.firebase.fcm.v1.FcmError`).
"""

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from notifications import content
from notifications.backends import classify
from notifications.backends.base import Outcome, Priority, PushBackend, PushMessage, SendResult, TokenError
from notifications.backends.credentials import (
    CredentialsRefused,
    CredentialsUnreachable,
    GoogleAccessToken,
    shared,
    tls_context,
)
from notifications.backends.h2transport import H2Client
from notifications.backends.http import CappedResponse, ExchangeFailed, capped_request, json_body
from notifications.backends.options import (
    DataError,
    expired_before_sending,
    missing,
    short_key,
    ttl_to_send,
    unknown,
    unreadable,
)
from weave.edge import HttpClass, http_class, outside_text

FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
RESERVED_KEYS = {"from", "notification", "message_type", "collapse_key", "priority", "time_to_live"}
# topic_api: "v1" (FCM's topic-subscription API, the default) or "iid" (Google's Instance ID batch API,
# notifications.backends.iid, while Google still answers it); iid_url: that API's URL. Not used to send.
OPTIONS = {"project_id", "credentials_file", "base_url", "ca_file", "iid_url", "topic_api"}
# Real tokens are about 160 characters ("<instance id>:APA91b..."); FCM documents no fixed length.
_TOKEN = re.compile(r"[A-Za-z0-9_:\-]{16,1024}")
# A Firebase installation ID: 22 characters of URL-safe base64 whose first four bits are 0111 (c, d, e or f).
_FID = re.compile(r"[cdef][A-Za-z0-9_\-]{21}")
# A stored token with this prefix is a Firebase installation ID, sent as the message's `fid` target.
FID_PREFIX = "fid:"
TOPIC_PREFIX, CONDITION_PREFIX = content.TOPIC_PREFIX, content.CONDITION_PREFIX


class FCMBackend(PushBackend):
    """Send through FCM HTTP v1 (`projects/{id}/messages:send`) with a service account's access token."""

    supports_http2: ClassVar[bool] = True
    supports_topics: ClassVar[bool] = True

    def __init__(self, *, alias: str, options: Mapping[str, Any], timeout: float, concurrency: int) -> None:
        super().__init__(alias=alias, options=options, timeout=timeout, concurrency=concurrency)
        self.project_id: str = options["project_id"]
        self.base_url: str = (options.get("base_url") or "https://fcm.googleapis.com").rstrip("/")
        self.url = f"{self.base_url}/v1/projects/{self.project_id}/messages:send"
        self.ca_file: str | None = options.get("ca_file")
        self.credentials = _access_token(options, timeout=self.timeout)

    @classmethod
    def prepare(cls, options: Mapping[str, Any], *, timeout: float) -> None:
        """Start fetching the access token: a new worker's first drain then finds it in hand, instead of
        loading the service account's key and waiting for the token endpoint while its rows wait."""
        _access_token(options, timeout=timeout).prefetch()

    @classmethod
    def check_options(cls, alias: str, options: Mapping[str, Any]) -> list[str]:
        problems = [*unknown(options, OPTIONS), *missing(options, "project_id", "credentials_file")]
        problems += unreadable(options, "credentials_file", "ca_file")
        if not problems:
            try:
                info = json.loads(open(options["credentials_file"], encoding="utf-8").read())  # noqa: SIM115
            except (OSError, ValueError) as exc:
                return [f"OPTIONS['credentials_file'] is not a JSON service-account file ({type(exc).__name__})."]
            lacking = [
                k for k in ("client_email", "private_key", "token_uri") if not (isinstance(info, dict) and info.get(k))
            ]
            if lacking:
                problems.append(f"OPTIONS['credentials_file'] lacks {', '.join(lacking)}: not a service-account file.")
        if options.get("topic_api") not in (None, "", "v1", "iid"):
            problems.append('OPTIONS[\'topic_api\'] must be "v1" (the default) or "iid".')
        for name in ("base_url", "iid_url"):
            url = options.get(name)
            if url and not str(url).startswith(("https://", "http://")):
                problems.append(f"OPTIONS[{name!r}] must be an https:// URL.")
        return problems

    @classmethod
    def canonical_token(cls, token: str) -> str:
        """Return the registration token unchanged if it has FCM's shape (16 to 1,024 of A-Z a-z 0-9 _ : -),
        or "fid:" and a Firebase installation ID (22 characters, starting c, d, e or f)."""
        if token.startswith(FID_PREFIX):
            if not _FID.fullmatch(token.removeprefix(FID_PREFIX)):
                raise TokenError(
                    "A Firebase installation ID is 22 characters of A-Z a-z 0-9 _ -, starting c, d, e or f."
                )
            return token
        if not _TOKEN.fullmatch(token):
            raise TokenError("An FCM registration token is 16 to 1024 characters of letters, digits, '_', ':' and '-'.")
        return token

    @classmethod
    def prepare_data(cls, data: Mapping[str, Any]) -> dict[str, str]:
        """Return `data` with string values only, as FCM requires; numbers and booleans are converted
        (`1` -> "1", `True` -> "true"), anything else refused with a DataError naming the key."""
        prepared: dict[str, str] = {}
        for key, value in data.items():
            if not isinstance(key, str) or not key:
                raise DataError(f"FCM data keys are non-empty strings, not {key!r}.")
            if key in RESERVED_KEYS or key.startswith(("google", "gcm")):
                raise DataError(f"FCM reserves the data key {key!r} (also any key starting with google or gcm).")
            if isinstance(value, str):
                prepared[key] = value
            elif isinstance(value, bool):
                prepared[key] = "true" if value else "false"
            elif isinstance(value, int | float) and value == value and abs(value) != float("inf"):
                prepared[key] = str(value)
            else:
                raise DataError(
                    f"FCM data values must be strings: data[{key!r}] is {type(value).__name__}. "
                    "Send it as a string (JSON-encode it yourself if the app expects JSON)."
                )
        return prepared

    def make_client(self, **extra: Any) -> Any:
        if self.base_url.startswith("https://") and not extra:
            # The lean HTTP/2 client; httpx only for a plain-http emulator or a caller's own options.
            return H2Client(verify=tls_context(self.ca_file), connect_timeout=self.timeout, streams=self.concurrency)
        return super().make_client(verify=tls_context(self.ca_file), **extra)

    def secrets(self) -> list[str]:
        token = self.credentials.current()
        return [token] if token else []

    async def send(self, message: PushMessage) -> SendResult:
        started = time.monotonic()
        deadline = started + self.timeout  # one deadline for token fetch, send and the one retry
        ttl = ttl_to_send(message)
        if ttl == 0:
            return expired_before_sending(message)
        content = json_body(fcm_message(message, ttl))

        async def credential(refused: str | None) -> str | SendResult:
            try:
                return (refused is None and self.credentials.current()) or await self.credentials.aget(
                    refused=refused, deadline=deadline - time.monotonic()
                )
            except CredentialsRefused as exc:
                return _auth_failed(f"Not sent: {self.reason(str(exc))}. Check credentials_file.", started, sent=False)
            except CredentialsUnreachable as exc:
                return SendResult(
                    outcome=Outcome.TEMPORARY,
                    reason=f"Could not get an FCM access token: {self.reason(str(exc))}; nothing was sent.",
                    latency_ms=_ms(started),
                    retry_after=exc.retry_after,
                    systemic=True,
                    sent=False,
                )

        async def exchange(token: str) -> CappedResponse | SendResult:
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json; charset=UTF-8"}
            try:
                return await capped_request(
                    self.client, "POST", self.url, deadline=max(0.0, deadline - time.monotonic()),
                    headers=headers, content=content, secrets=[token],
                )  # fmt: skip
            except ExchangeFailed as exc:
                return classify.failed_exchange(exc, where=self.base_url)

        return await self.send_refreshing_once(
            credential,
            exchange,
            refuses=lambda response: response.status == 401,  # nothing was delivered: replace the token once
            classify=lambda response, token, again: classify_fcm(
                response, secrets=[token], where=self.base_url, after_refresh=again
            ),
        )


def _access_token(options: Mapping[str, Any], *, timeout: float) -> GoogleAccessToken:
    """The process-wide token of the service account in `options`: single flight, one fetch serves every sender."""
    credentials_file, ca_file = str(options["credentials_file"]), options.get("ca_file")
    return shared(
        ("fcm", credentials_file, ca_file),
        lambda: GoogleAccessToken(credentials_file, ca_file=ca_file, timeout=timeout),
    )


def fcm_message(message: PushMessage, ttl: int | None) -> dict[str, Any]:
    """The v1 request body for `message`, with `ttl` seconds left (None: FCM's default of four weeks)."""
    high = message.priority == Priority.HIGH
    silent = content.is_silent(message.title, message.body)
    # What replaces on screen: the site's collapse key, else the notification's own key, so a resend
    # after an unknown outcome replaces the first copy instead of showing twice.
    tag = message.collapse_key or message.idempotency_key
    android: dict[str, Any] = {"priority": "HIGH" if high else "NORMAL", **content.fcm_android_config(message.options)}
    if not silent:
        android["notification"] = content.fcm_android_notification(tag=tag, options=message.options)
    if message.collapse_key:
        # Only a site's own collapse keys: FCM keeps at most four distinct collapse keys per device while
        # it is offline, so a fresh key per message would let FCM drop stored messages.
        android["collapse_key"] = message.collapse_key
    # A background push to iOS must go at priority 5 with push-type background, or APNs refuses it.
    apns_headers = {
        "apns-priority": "10" if high and not silent else "5",
        "apns-collapse-id": _apns_collapse_id(tag),
        "apns-push-type": "background" if silent else "alert",
    }
    webpush_headers = {"Urgency": "high" if high else "normal"}
    if ttl is not None:
        android["ttl"] = f"{ttl}s"
        apns_headers["apns-expiration"] = str(int(time.time()) + ttl)
        webpush_headers["TTL"] = str(ttl)
    aps = content.apns_aps(title=message.title, body=message.body, options=message.options)
    webpush = content.fcm_webpush(title=message.title, body=message.body, options=message.options)
    webpush["headers"] = webpush_headers
    apns: dict[str, Any] = {"headers": apns_headers, "payload": {"aps": aps, **content.apns_extra(message.options)}}
    if label := content.fcm_options(message.options, "apns"):
        apns["fcm_options"] = label
    body: dict[str, Any] = {**_target(message.token), "android": android, "apns": apns, "webpush": webpush}
    if label := content.fcm_options(message.options):
        body["fcm_options"] = label
    if notification := content.fcm_notification(title=message.title, body=message.body, options=message.options):
        body["notification"] = notification
    if message.data:
        body["data"] = dict(message.data)
    return {"message": body}


def _target(token: str) -> dict[str, str]:
    """Whom the message goes to: a registration token, or (Weave's own prefixes) an installation ID, a topic
    or a condition."""
    for prefix in (FID_PREFIX, TOPIC_PREFIX, CONDITION_PREFIX):
        if token.startswith(prefix):
            return {prefix.rstrip(":"): token.removeprefix(prefix)}
    return {"token": token}


def _apns_collapse_id(key: str) -> str:
    return short_key(key, limit=64)


def fcm_error(response: CappedResponse) -> tuple[str, str, str, list[str]]:
    """Return (FcmError errorCode, google.rpc status, message, BadRequest fields) from an error body."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return "", "", "", []
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "", "", "", []
    code, fields = "", []
    for detail in error.get("details") or []:
        if not isinstance(detail, dict):
            continue
        if detail.get("@type") == FCM_ERROR_TYPE:
            code = str(detail.get("errorCode", ""))
        elif detail.get("@type") == BAD_REQUEST_TYPE:
            fields += [str(v.get("field", "")) for v in detail.get("fieldViolations") or [] if isinstance(v, dict)]
    return code, str(error.get("status", "")), str(error.get("message", "")), fields


@dataclass(frozen=True)
class _Refusal:
    """An FCM error answer as the classification reads it."""

    kind: HttpClass
    code: str  # FcmError errorCode
    rpc_status: str
    text: str
    fields: list[str]
    said: str  # what FCM said, sanitized
    label: str
    base: dict[str, Any]
    response: CappedResponse


def classify_fcm(
    response: CappedResponse, *, secrets: list[str], where: str = "FCM", after_refresh: bool = False
) -> SendResult:
    """Turn an FCM v1 answer into an outcome, from FCM's errorCode first and the HTTP status second."""
    status = response.status
    kind = http_class(status)
    if kind == HttpClass.SUCCESS:
        return _delivered(response, secrets)
    if kind == HttpClass.REDIRECT:
        return classify.redirect(response, where=where, secrets=secrets)
    code, rpc_status, text, fields = fcm_error(response)
    said = outside_text(text, secrets=secrets) or response.snippet(secrets=secrets)
    base: dict[str, Any] = {"http_status": status, "latency_ms": response.latency_ms}
    label = code or rpc_status or f"HTTP {status}"
    refusal = _Refusal(kind, code, rpc_status, text, fields, said, label, base, response)
    for judge in (_dead_token, _refused_message, _provider_trouble):
        if (result := judge(refusal)) is not None:
            return result
    if kind == HttpClass.AUTH or (status == 404 and not code):
        return _misconfigured(refusal, status, after_refresh)
    if kind == HttpClass.TIMEOUT:
        return SendResult(outcome=Outcome.TEMPORARY, reason=f"FCM timed out reading the request: {said}", **base)
    return SendResult(outcome=Outcome.PERMANENT, reason=f"FCM refused the message ({refusal.label}): {said}", **base)


def _dead_token(r: _Refusal) -> SendResult | None:
    if r.code not in ("UNREGISTERED", "SENDER_ID_MISMATCH"):
        return None
    why = "no longer registered (the app was uninstalled or the token expired)" if r.code == "UNREGISTERED" else (
        "registered to another Firebase sender")  # fmt: skip
    return SendResult(
        outcome=Outcome.PERMANENT, reason=f"FCM {r.label}: the device token is {why}. {r.said}".strip(),
        token_invalid=True, **r.base,
    )  # fmt: skip


def _refused_message(r: _Refusal) -> SendResult | None:
    if not (r.code == "INVALID_ARGUMENT" or (r.base["http_status"] == 400 and r.rpc_status == "INVALID_ARGUMENT")):
        return None
    on_token = bool({"message.token", "message.fid"} & set(r.fields)) or "registration token" in r.text.lower()
    what = "the device token is not a valid FCM registration token" if on_token else "the message was refused"
    return SendResult(
        outcome=Outcome.PERMANENT, reason=f"FCM {r.label}: {what}: {r.said}", token_invalid=on_token, **r.base
    )


def _provider_trouble(r: _Refusal) -> SendResult | None:
    if r.code not in ("QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL") and r.kind not in (
        HttpClass.THROTTLED,
        HttpClass.SERVER,
    ):
        return None
    retry_after = r.response.retry_after()
    asked = f"Retry-After {retry_after:g} s" if retry_after is not None else "no Retry-After"
    return SendResult(
        outcome=Outcome.TEMPORARY, reason=f"FCM {r.label} ({asked}): {r.said}", retry_after=retry_after,
        systemic=True, **r.base,
    )  # fmt: skip


def _misconfigured(r: _Refusal, status: int, after_refresh: bool) -> SendResult:
    if status == 401:
        what = "refused our access token" + (" even after it was refreshed" if after_refresh else "")
    elif status == 403:
        what = "refused the service account for this project (check project_id and its FCM permission)"
    else:
        what = "does not know this project or URL (check project_id and base_url)"
    return _auth_failed(f"FCM {what} ({r.label}): {r.said}", None, **r.base)


def _delivered(response: CappedResponse, secrets: list[str]) -> SendResult:
    try:
        name = response.json().get("name", "")
    except (ValueError, AttributeError, UnicodeDecodeError):
        name = ""
    note = "" if name else f"Delivered (HTTP {response.status}), but the answer had no message name."
    return SendResult(
        outcome=Outcome.DELIVERED,
        http_status=response.status,
        latency_ms=response.latency_ms,
        provider_message_id=outside_text(str(name), secrets=secrets, limit=200),
        reason=note,
    )


def _auth_failed(reason: str, started: float | None, **base: Any) -> SendResult:
    # Our credentials, not this message: temporary for the row, and the breaker opens at once.
    if started is not None:
        base.setdefault("latency_ms", _ms(started))
    return SendResult(outcome=Outcome.TEMPORARY, reason=reason, systemic=True, fatal=True, **base)


def _ms(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))

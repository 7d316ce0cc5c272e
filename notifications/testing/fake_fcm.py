"""A local stand-in for FCM HTTP v1 and Google's OAuth2 token endpoint, strict enough to catch real mistakes.

    keys = TestKeys.create(tmp_path)
    with FakeFCM(keys) as fcm:                       # HTTPS with HTTP/2 (ALPN h2, http/1.1 too), test CA
        keys.set_token_uri(fcm.token_uri)            # the service-account file names the fake token endpoint
        options = {"project_id": FCM_PROJECT_ID, "credentials_file": str(keys.fcm_service_account),
                   "base_url": fcm.url, "ca_file": str(keys.ca_file)}

What it checks, like Google does:
- `POST /token`: an OAuth2 JWT-bearer grant whose RS256 assertion verifies against the service account's
  public key, with the right issuer, audience (the token URI), scope and a lifetime of at most one hour.
- `POST /v1/projects/{id}/messages:send`: a live bearer token from that endpoint, the right project, and
  the v1 message schema (unknown fields refused, `data` values strings only, `android.ttl` a duration,
  `android.priority` an enum name, `apns.headers` strings).
- `POST /iid/v1:batchAdd` and `:batchRemove`: topic subscriptions, as strict as Google (`fake_fcm_iid`).
- `/v1/projects/{id}/registrations/{registration}/topicSubscriptions[/{topic}]`: the v1 topic-subscription
  API (create, delete, get, list) over the same subscribers (`fake_fcm_topics`).
- Errors are FCM's own JSON: `{"error": {"code", "message", "status", "details": [{"@type":
  "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": ...}]}}`.

Token behaviour: tokens starting `dead-` (or passed to `unregister()`) are UNREGISTERED; tokens starting
`foreign-` belong to another sender (SENDER_ID_MISMATCH); tokens outside FCM's alphabet are
INVALID_ARGUMENT on `message.token`. Faults (`configure(error="UNAVAILABLE", rate=0.3)`, or a `script`
of errors one per request) add QUOTA_EXCEEDED, UNAVAILABLE, INTERNAL, UNAUTHENTICATED and hangs.
"""

import asyncio
import json
import re
import secrets
import threading
import time
from typing import Any
from urllib.parse import parse_qs

import jwt

from notifications.testing.asgi_fake import AsgiApp, HypercornFake, Request, Response
from notifications.testing.fake_fcm_iid import IID_PATHS, FakeInstanceId
from notifications.testing.fake_fcm_topics import PATH as TOPIC_SUBSCRIPTION_PATH
from notifications.testing.fake_fcm_topics import FakeTopicSubscriptions
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
from notifications.testing.keys import FCM_CLIENT_EMAIL, FCM_PROJECT_ID, TestKeys

GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"
SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_:\-]{16,4096}$")
# What Google's front end puts on an FCM v1 answer besides the date and the server (Hypercorn adds its
# own): the same fields on every answer, so a client's HPACK decoder finds them indexed after the first.
_ANSWER_HEADERS = {
    "content-type": "application/json; charset=UTF-8",
    "vary": "Origin, X-Origin, Referer",
    "cache-control": "private",
    "x-xss-protection": "0",
    "x-frame-options": "SAMEORIGIN",
    "x-content-type-options": "nosniff",
    "alt-svc": 'h3=":443"; ma=2592000,h3-29=":443"; ma=2592000',
    "accept-ranges": "none",
}
_DURATION_RE = re.compile(r"^\d{1,12}(\.\d{1,9})?s$")
_SEND_RE = re.compile(r"^/v1/projects/([^/]+)/messages:send$")

# error name -> (HTTP status, google.rpc status, message, FcmError errorCode or None)
ERRORS: dict[str, tuple[int, str, str, str | None]] = {
    "UNREGISTERED": (404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED"),
    "INVALID_ARGUMENT": (
        400,
        "INVALID_ARGUMENT",
        "The registration token is not a valid FCM registration token",
        "INVALID_ARGUMENT",
    ),
    "SENDER_ID_MISMATCH": (403, "PERMISSION_DENIED", "SenderId mismatch", "SENDER_ID_MISMATCH"),
    "QUOTA_EXCEEDED": (
        429,
        "RESOURCE_EXHAUSTED",
        "Quota exceeded for quota metric 'Send requests' of service 'fcm.googleapis.com'.",
        "QUOTA_EXCEEDED",
    ),
    "UNAVAILABLE": (503, "UNAVAILABLE", "The service is currently unavailable.", "UNAVAILABLE"),
    "INTERNAL": (500, "INTERNAL", "Internal error encountered.", "INTERNAL"),
    "THIRD_PARTY_AUTH_ERROR": (
        401,
        "UNAUTHENTICATED",
        "Auth error from APNS or Web Push Service",
        "THIRD_PARTY_AUTH_ERROR",
    ),
    "UNAUTHENTICATED": (
        401,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
        "other valid authentication credential.",
        None,
    ),
}

# The v1 schema, as far as the backends use it. Proto JSON accepts lowerCamelCase and the original names.
_MESSAGE_FIELDS = {"name", "data", "notification", "android", "webpush", "apns", "fcm_options", "token", "topic",
                   "condition", "fid"}  # fmt: skip
# A Firebase installation ID: 22 characters of URL-safe base64, the first one c, d, e or f.
_FID_RE = re.compile(r"[cdef][A-Za-z0-9_\-]{21}")
_NOTIFICATION_FIELDS = {"title", "body", "image"}
_ANDROID_FIELDS = {"collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification",
                   "fcm_options", "direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok"}  # fmt: skip
_ANDROID_FLAGS = ("direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok")
_PROXY = ("PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED")
_ANALYTICS_LABEL_RE = re.compile(r"[a-zA-Z0-9\-_.~%]{1,50}")
_ANDROID_NOTIFICATION_FIELDS = {"title", "body", "icon", "color", "sound", "tag", "click_action", "body_loc_key",
                                "title_loc_key", "channel_id", "ticker", "sticky", "image", "notification_priority",
                                "default_sound", "visibility", "notification_count", "body_loc_args",
                                "title_loc_args", "proxy"}  # fmt: skip
# FCM's topic names; a condition combines quoted topic names with &&, || and !.
_TOPIC_RE = re.compile(r"[a-zA-Z0-9\-_.~%]{1,900}")
_CONDITION_RE = re.compile(r"(\s|'[a-zA-Z0-9\-_.~%]{1,900}'\s+in\s+topics|&&|\|\||!|\(|\))+")
_APNS_FIELDS = {"headers", "payload", "fcm_options"}
_WEBPUSH_FIELDS = {"headers", "data", "notification", "fcm_options"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def google_error(name: str, *, message: str | None = None, field: str | None = None) -> Response:
    """FCM's error body for `name` (a key of ERRORS)."""
    status, rpc_status, text, code = ERRORS[name]
    details: list[dict[str, Any]] = []
    if code is not None:
        details.append({"@type": FCM_ERROR_TYPE, "errorCode": code})
    if field is not None:
        details.append(
            {"@type": BAD_REQUEST_TYPE, "fieldViolations": [{"field": field, "description": message or text}]}
        )
    body: dict[str, Any] = {"code": status, "message": message or text, "status": rpc_status}
    if details:
        body["details"] = details
    return Response.json(status, {"error": body})


class SchemaError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _check_fields(value: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError(where, f"Invalid value at '{where}': expected an object.")
    for key in value:
        if _snake(key) not in allowed:
            raise SchemaError(
                where, f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
            )
    return {_snake(k): v for k, v in value.items()}


def _check_string_map(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise SchemaError(where, f"Invalid value at '{where}': expected a map of strings.")
    for key, item in value.items():
        if not isinstance(item, str):
            raise SchemaError(
                f"{where}[{key}]",
                f"Invalid value at '{where}[{key}]' ({type(item).__name__}), {item!r}: map values must be strings.",
            )


def _check_android(value: Any) -> dict[str, Any]:
    android = _check_fields(value, _ANDROID_FIELDS, "message.android")
    if "ttl" in android and not (isinstance(android["ttl"], str) and _DURATION_RE.match(android["ttl"])):
        raise SchemaError("message.android.ttl", f"Invalid value at 'message.android.ttl' ({android['ttl']!r}): "
                          "expected a duration such as \"3.5s\".")  # fmt: skip
    if "priority" in android and android["priority"] not in ("NORMAL", "HIGH"):
        raise SchemaError(
            "message.android.priority",
            f"Invalid value at 'message.android.priority' (AndroidMessagePriority), {android['priority']!r}",
        )
    if "data" in android:
        _check_string_map(android["data"], "message.android.data")
    if "notification" in android:
        notification = _check_fields(
            android["notification"], _ANDROID_NOTIFICATION_FIELDS, "message.android.notification"
        )
        if "proxy" in notification and notification["proxy"] not in _PROXY:
            raise SchemaError("message.android.notification.proxy", "Invalid value at "
                              f"'message.android.notification.proxy' (Proxy), {notification['proxy']!r}")  # fmt: skip
    for flag in _ANDROID_FLAGS:
        if flag in android and not isinstance(android[flag], bool):
            raise SchemaError(f"message.android.{flag}", f"Invalid value at 'message.android.{flag}' (TYPE_BOOL).")
    if "fcm_options" in android:
        _check_fcm_options(android["fcm_options"], "message.android.fcm_options", {"analytics_label"})
    return android


def _check_fcm_options(value: Any, where: str, allowed: set[str]) -> None:
    """An fcm_options block: known fields only, an analytics_label of ^[a-zA-Z0-9-_.~%]{1,50}$."""
    options = _check_fields(value, allowed, where)
    label = options.get("analytics_label")
    if label is not None and not (isinstance(label, str) and _ANALYTICS_LABEL_RE.fullmatch(label)):
        raise SchemaError(f"{where}.analytics_label", f"Invalid value at '{where}.analytics_label': "
                          "an analytics label matches ^[a-zA-Z0-9-_.~%]{1,50}$.")  # fmt: skip


def _check_target(message: dict[str, Any]) -> None:
    """Exactly one of fid, token, topic and condition, the last two well-formed."""
    targets = [k for k in ("fid", "token", "topic", "condition") if k in message]
    if len(targets) != 1:
        raise SchemaError(
            "message", "Exactly one of message.fid, message.token, message.topic or message.condition is required."
        )
    if "topic" in message and not (isinstance(message["topic"], str) and _TOPIC_RE.fullmatch(message["topic"])):
        raise SchemaError("message.topic", "Invalid value at 'message.topic': not a valid topic name.")
    if "condition" in message and not (
        isinstance(message["condition"], str) and _CONDITION_RE.fullmatch(message["condition"])
    ):
        raise SchemaError("message.condition", "Invalid value at 'message.condition': not a valid condition.")


def _check_apns(value: Any) -> dict[str, Any]:
    apns = _check_fields(value, _APNS_FIELDS, "message.apns")
    if "headers" in apns:
        _check_string_map(apns["headers"], "message.apns.headers")
    if "payload" in apns and not isinstance(apns["payload"], dict):
        raise SchemaError("message.apns.payload", "Invalid value at 'message.apns.payload': expected an object.")
    if "fcm_options" in apns:
        _check_fcm_options(apns["fcm_options"], "message.apns.fcm_options", {"analytics_label", "image"})
    return apns


def _check_webpush(value: Any) -> dict[str, Any]:
    webpush = _check_fields(value, _WEBPUSH_FIELDS, "message.webpush")
    for key in ("headers", "data"):
        if key in webpush:
            _check_string_map(webpush[key], f"message.webpush.{key}")
    return webpush


def validate_message(body: Any) -> dict[str, Any]:
    """Return the normalised message of a send request, or raise SchemaError like FCM's INVALID_ARGUMENT."""
    if not isinstance(body, dict) or set(body) - {"message", "validate_only", "validateOnly"}:
        raise SchemaError("", "Invalid JSON payload received: the request holds only 'message' and 'validate_only'.")
    message = _check_fields(body.get("message"), _MESSAGE_FIELDS, "message")
    _check_target(message)
    if "data" in message:
        _check_string_map(message["data"], "message.data")
    if "notification" in message:
        notification = _check_fields(message["notification"], _NOTIFICATION_FIELDS, "message.notification")
        for key, value in notification.items():
            if not isinstance(value, str):
                raise SchemaError(f"message.notification.{key}", f"Invalid value at 'message.notification.{key}'.")
    if "android" in message:
        message["android"] = _check_android(message["android"])
    if "apns" in message:
        message["apns"] = _check_apns(message["apns"])
    if "webpush" in message:
        message["webpush"] = _check_webpush(message["webpush"])
    if "fcm_options" in message:
        _check_fcm_options(message["fcm_options"], "message.fcm_options", {"analytics_label"})
    return message


class FakeFCM(ProviderFake):
    """The FCM v1 fake: OAuth2 token endpoint and messages:send, over HTTPS with HTTP/2."""

    def __init__(
        self,
        keys: TestKeys,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        project_id: str = FCM_PROJECT_ID,
        client_email: str = FCM_CLIENT_EMAIL,
        token_lifetime: int = 3600,
        tls: bool = True,
        max_streams: int = 1000,
        **faults: Any,
    ) -> None:
        self.keys = keys
        self.project_id = project_id
        self.client_email = client_email
        self.token_lifetime = token_lifetime
        self.state = FakeState(Faults(**faults))
        self._tokens: dict[str, float] = {}  # access token -> expiry (time.time())
        self._token_lock = threading.Lock()
        self.token_requests = 0
        self.token_refusals: list[str] = []
        self.dead: set[str] = set()
        # Topic subscriptions (Google's Instance ID batch API) on the same server: see fake_fcm_iid.
        self.iid = FakeInstanceId(
            authorised=self._authorised,
            dead=lambda token: token.startswith("dead-") or token in self.dead,
            token_re=_TOKEN_RE,
        )
        # The v1 topic-subscription API over the same subscribers (fake_fcm_topics).
        self.topics = FakeTopicSubscriptions(self.iid, project_id=project_id, token_re=_TOKEN_RE)
        self.server = HypercornFake(
            AsgiApp(self._handle),
            host=host,
            port=port,
            certfile=keys.server_cert if tls else None,
            keyfile=keys.server_key if tls else None,
            max_streams=max_streams,
        )

    # --- control -----------------------------------------------------------------------------------

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def reset(self) -> None:
        super().reset()
        self.iid.reset()
        self.topics.reset()
        with self._token_lock:
            self.token_requests = 0
            self.token_refusals = []

    def stats(self) -> dict[str, Any]:
        snapshot = self.state.snapshot()
        with self._token_lock:
            snapshot["token_requests"] = self.token_requests
            snapshot["token_refusals"] = list(self.token_refusals)
        return snapshot

    def deliveries(self) -> list[Delivery]:
        with self.state.lock:
            return list(self.state.deliveries)

    def unregister(self, token: str) -> None:
        """Make `token` UNREGISTERED from now on (the app was uninstalled)."""
        with self.state.lock:
            self.dead.add(token)

    def revoke_access_tokens(self) -> None:
        """Forget every access token issued so far: the next sends get 401 until the client refreshes."""
        with self._token_lock:
            self._tokens.clear()

    # --- the endpoints ----------------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        if request.method == "GET" and request.path == "/_stats":
            return Response.json(200, self.stats())  # for a fake in another process (the demo, the chaos run)
        if request.method == "POST" and request.path == "/token":
            return await self._token(request)
        if request.method == "POST" and request.path in IID_PATHS:
            return await self.iid.handle(request)
        if topic_call := TOPIC_SUBSCRIPTION_PATH.match(request.path):
            return await self.topics.handle(request, topic_call)
        match = _SEND_RE.match(request.path)
        if request.method == "POST" and match:
            return await self._send(request, match.group(1))
        return Response.json(404, {"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}})

    async def _token(self, request: Request) -> Response:
        with self._token_lock:
            self.token_requests += 1
        with self.state.lock:
            fault, expires_in, hang = (
                self.state.faults.token_fault, self.state.faults.token_expires_in, self.state.faults.hang_seconds
            )  # fmt: skip
            retry_after = self.state.faults.retry_after
        if fault == "hang":
            await asyncio.sleep(hang)
            return Response.json(503, {"error": "unavailable"})
        if fault == "500":
            headers = {"retry-after": retry_after_value(retry_after)} if retry_after else {}
            return Response.json(500, {"error": "internal_failure", "error_description": "Backend Error"}, headers)
        if fault == "html":
            page = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>"
            return Response(200, page, {"content-type": "text/html; charset=utf-8"})
        if fault == "401":
            return Response.json(401, {"error": "unauthorized_client", "error_description": "Client is unauthorized."})
        if fault == "invalid_grant":
            return self._refuse_token("invalid_grant", "Invalid grant: account not found")
        form = {k: v[0] for k, v in parse_qs(request.body.decode("latin-1")).items()}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return self._refuse_token("unsupported_grant_type", "Invalid grant_type.")
        try:
            claims = jwt.decode(
                form.get("assertion", ""),
                self.keys.fcm_public_key_pem,
                algorithms=["RS256"],
                # google-auth signs for Google's token URI even when the file names another; both are fine.
                audience=[self.token_uri, GOOGLE_TOKEN_URI],
                issuer=self.client_email,
                options={"require": ["exp", "iat", "iss", "aud"]},
                leeway=5,
            )
        except jwt.PyJWTError as exc:
            return self._refuse_token("invalid_grant", f"Invalid JWT: {exc}")
        if SCOPE not in str(claims.get("scope", "")).split():
            return self._refuse_token("invalid_scope", f"The assertion does not ask for {SCOPE}.")
        if int(claims["exp"]) - int(claims["iat"]) > 3600:
            return self._refuse_token("invalid_grant", "Invalid JWT: the assertion may live at most one hour.")
        token = f"ya29.fake-{secrets.token_urlsafe(24)}"
        lifetime = self.token_lifetime if expires_in is None else expires_in
        with self._token_lock:
            # A short stated lifetime is a statement, not a deadline the fake enforces: real tokens stay
            # good a little past it, and the client's floor relies on the refusal to tell it otherwise.
            self._tokens[token] = time.time() + max(lifetime, self.token_lifetime)
        return Response.json(200, {"access_token": token, "expires_in": lifetime, "token_type": "Bearer"})

    def _refuse_token(self, error: str, description: str) -> Response:
        with self._token_lock:
            self.token_refusals.append(description)
        return Response.json(400, {"error": error, "error_description": description})

    def _authorised(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        with self._token_lock:
            expiry = self._tokens.get(token)
        return scheme.lower() == "bearer" and expiry is not None and expiry > time.time()

    async def _send(self, request: Request, project: str) -> Response:
        faults, draw = self.state.begin(request.http_version, request.client)
        try:
            response = await self._answer(request, project, faults, draw)
        except LostBeforeDelivery:
            self.state.end(503, "lost")
            return google_error("UNAVAILABLE")
        reason = ""
        if response.status >= 400:
            error = response.body.decode(errors="replace")
            reason = next((name for name, spec in ERRORS.items() if spec[3] and f'"{spec[3]}"' in error), "")
            reason = reason or ("UNAUTHENTICATED" if response.status == 401 else str(response.status))
        self.state.end(response.status, reason)
        return hostile_body(faults, response, request.headers, f"{self.url}{request.path}")

    def _target(self, message: dict[str, Any]) -> tuple[str, Response | None]:
        """The device a message goes to (a token or an installation ID), or FCM's refusal of it."""
        token = message.get("token", "")
        if token and not _TOKEN_RE.match(token):
            return token, google_error("INVALID_ARGUMENT", field="message.token")
        if "fid" in message:
            token = message["fid"] if isinstance(message["fid"], str) else ""
            if not _FID_RE.fullmatch(token):
                refused = google_error(
                    "INVALID_ARGUMENT", message="Invalid Firebase installation ID.", field="message.fid"
                )
                return token, refused
        if token.startswith("dead-") or token in self.dead:
            return token, google_error("UNREGISTERED")
        if token.startswith("foreign-"):
            return token, google_error("SENDER_ID_MISMATCH")
        return token, None

    def _refusal(self, request: Request, project: str) -> tuple[dict[str, Any], Response | None]:
        """The checked message of a send, or what FCM answers before looking at its target."""
        if not self._authorised(request):
            return {}, google_error("UNAUTHENTICATED")
        if project != self.project_id:
            denied = {"code": 403, "message": f"Permission denied on project {project}.", "status": "PERMISSION_DENIED"}
            return {}, Response.json(403, {"error": denied})
        try:
            message = validate_message(request.json())
        except ValueError as exc:  # SchemaError, or a body that is not JSON
            field = getattr(exc, "field", "") or None
            return {}, google_error("INVALID_ARGUMENT", message=str(exc), field=field)
        # FCM's limit: 4 KiB for what the device is sent (notification and data; the platform blocks aside).
        shown = {key: message[key] for key in ("notification", "data") if key in message}
        if len(json.dumps(shown, separators=(",", ":"), ensure_ascii=False).encode()) > 4096:
            return {}, google_error("INVALID_ARGUMENT", message="Message is too big (more than 4096 bytes).")
        return message, None

    async def _answer(self, request: Request, project: str, faults: Faults, draw: float) -> Response:
        message, refused = self._refusal(request, project)
        if refused is not None:
            return refused
        hang = await apply_latency(faults, draw)
        if error := pick_error(faults, draw, self.state.pop_script()):
            response = google_error(error)
            if faults.retry_after and response.status in (429, 503):
                response.headers["retry-after"] = retry_after_value(faults.retry_after)
            return response
        token, refused = self._target(message)
        if refused is not None:
            return refused
        android = message.get("android", {})
        collapse = str((android.get("notification") or {}).get("tag", ""))
        self.state.deliver(Delivery(token=token, collapse=collapse, message=message, headers=dict(request.headers)))
        name = f"projects/{project}/messages/0:{time.time_ns()}%{secrets.token_hex(8)}"
        if hang:
            await asyncio.sleep(faults.hang_seconds)
        return Response.json(200, {"name": name}, _ANSWER_HEADERS)

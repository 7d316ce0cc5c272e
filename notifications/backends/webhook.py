"""The generic webhook backend: one JSON POST per message to the site's own push gateway.

Wire format (unchanged since the first release): `POST <url>` with
`{"to": token, "title": ..., "body": ..., "data": {...}}`, `Authorization: Bearer <token>` and
`Idempotency-Key: <the notification's key>`, the same key on every retry. A 2xx delivers (the message
id is read from the JSON body's `id`), 401/403 refuses our credentials, 429/408/5xx are temporary,
3xx is a misconfigured URL, 410 says the device token is gone, other 4xx reject the message.
"""

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from notifications.backends import classify
from notifications.backends.base import Outcome, PushBackend, PushMessage, SendResult
from notifications.backends.http import CappedResponse, ExchangeFailed, capped_request, json_body
from weave.edge import HttpClass, http_class, outside_text, safe_url


class WebhookBackend(PushBackend):
    """POST each message as JSON to OPTIONS["url"] with a bearer token and the message's Idempotency-Key."""

    def __init__(self, *, alias: str, options: Mapping[str, Any], timeout: float, concurrency: int) -> None:
        super().__init__(alias=alias, options=options, timeout=timeout, concurrency=concurrency)
        self.url: str = options["url"]
        self.token: str = options.get("token") or ""
        # The URL as it may appear in a reason or a log line: no userinfo.
        self.where = safe_url(self.url)
        password = urlsplit(self.url).password  # a password in the URL is still a password
        self._secrets = [s for s in (self.token, password) if s]
        self._url = httpx.URL(self.url)  # parsed once, not per send
        self._headers = {"Content-Type": "application/json"}
        if self.token:
            # No token, no header: "Bearer " with nothing after it is malformed, and a strict transport
            # refuses it before a byte leaves.
            self._headers["Authorization"] = f"Bearer {self.token}"

    @classmethod
    def check_options(cls, alias: str, options: Mapping[str, Any]) -> list[str]:
        url = options.get("url")
        if not url:
            return ["OPTIONS['url'] (PUSH_URL) is empty: there is no push provider to deliver to."]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return [f"OPTIONS['url'] (PUSH_URL) must be an http:// or https:// URL, not {safe_url(str(url))!r}."]
        token = options.get("token")
        if token is not None and not isinstance(token, str):
            return ["OPTIONS['token'] (PUSH_TOKEN) must be a string."]
        return []

    def secrets(self) -> list[str]:
        return self._secrets

    async def send(self, message: PushMessage) -> SendResult:
        payload = {"to": message.token, "title": message.title, "body": message.body, "data": dict(message.data)}
        # The same Idempotency-Key on every retry: a provider that honours it delivers at most once.
        headers = {**self._headers, "Idempotency-Key": message.idempotency_key}
        content = json_body(payload)
        secrets = self._secrets
        try:
            response = await capped_request(
                self.client, "POST", self._url, deadline=self.timeout, headers=headers, content=content, secrets=secrets
            )
        except ExchangeFailed as exc:
            return classify.failed_exchange(exc, where=self.where)
        return classify_webhook(response, secrets=secrets, where=self.where)


def classify_webhook(response: CappedResponse, *, secrets: list[str], where: str = "the provider") -> SendResult:
    """Turn a webhook answer into an outcome."""
    status = response.status
    kind = http_class(status)
    base: dict[str, Any] = {"http_status": status, "latency_ms": response.latency_ms}
    if kind == HttpClass.SUCCESS:
        return _delivered(response, secrets, base)
    if kind == HttpClass.REDIRECT:
        return classify.redirect(response, where=where, secrets=secrets)
    if kind in (HttpClass.THROTTLED, HttpClass.SERVER, HttpClass.TIMEOUT):
        what = {
            HttpClass.THROTTLED: "Rate-limited by the provider",
            HttpClass.TIMEOUT: "The provider timed out reading the request",
        }.get(kind, "The provider failed")
        return classify.throttled_or_unavailable(response, what=what, secrets=secrets)
    body = response.snippet(secrets=secrets)
    tail = f": {body}" if body else ""
    if kind == HttpClass.AUTH:
        # Our credentials, not this message: temporary (the message is fine) and fatal for the batch,
        # so the breaker stops before every row burns an attempt on a bad token.
        return SendResult(
            outcome=Outcome.TEMPORARY,
            reason=f"The provider refused our credentials (HTTP {status}); check WEAVE PUSH_TOKEN{tail}.",
            systemic=True, fatal=True, **base,
        )  # fmt: skip
    if kind == HttpClass.INVALID:
        reason = f"The provider answered with an invalid HTTP status {status}{tail}."
        return SendResult(outcome=Outcome.TEMPORARY, reason=reason, systemic=True, **base)
    if status in (404, 410):
        return SendResult(
            outcome=Outcome.PERMANENT,
            reason=f"The device token is invalid or no longer registered (HTTP {status}){tail}.",
            # 410 Gone is unambiguous; a 404 may also be a wrong gateway path, so it fails the message
            # without deactivating the device.
            token_invalid=status == 410, **base,
        )  # fmt: skip
    reason = f"The provider rejected the notification (HTTP {status}){tail}."
    return SendResult(outcome=Outcome.PERMANENT, reason=reason, **base)


def _delivered(response: CappedResponse, secrets: list[str], base: dict[str, Any]) -> SendResult:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError) as exc:
        return SendResult(
            outcome=Outcome.DELIVERED,
            reason=(
                f"Delivered (HTTP {response.status}), but the response body was not valid JSON "
                f"({type(exc).__name__}): {response.snippet(secrets=secrets)!r}"
            ),
            **base,
        )
    if not isinstance(body, dict):
        reason = f"Delivered (HTTP {response.status}), but the body was not a JSON object."
        return SendResult(outcome=Outcome.DELIVERED, reason=reason, **base)
    return SendResult(outcome=Outcome.DELIVERED, provider_message_id=_safe_id(body.get("id", ""), secrets), **base)


def _safe_id(value: Any, secrets: list[str]) -> str:
    return outside_text(str(value), secrets=secrets, limit=200) if value not in (None, "") else ""

"""A generic HTTP JSON push provider (httpx), with the outcome classes of issue 3."""

import json
import time

import httpx

from notifications.providers.base import Outcome, PushMessage, SendResult
from weave.retry import parse_retry_after

_SNIPPET = 200


def _snippet(response: httpx.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:_SNIPPET] + ("…" if len(text) > _SNIPPET else "")


class HttpJsonProvider:
    """POST each message as JSON to `url` with a bearer token and the message's Idempotency-Key."""

    def __init__(
        self, *, url: str, token: str, timeout: float, concurrency: int = 10, client: httpx.Client | None = None
    ) -> None:
        self.url = url
        self.token = token
        self.timeout = timeout
        # One pooled client shared by the sending threads (httpx.Client is thread-safe); the pool is as
        # wide as the concurrency so a send never queues for a connection.
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )

    def close(self) -> None:
        self._client.close()

    def send(self, message: PushMessage) -> SendResult:
        """Send one message and classify the result; never raises for transport or HTTP errors."""
        headers = {
            "Authorization": f"Bearer {self.token}",
            # The same key on every retry: a provider that honours it delivers at most once.
            "Idempotency-Key": message.idempotency_key,
        }
        payload = {"to": message.to, "title": message.title, "body": message.body, "data": message.data}
        started = time.monotonic()
        try:
            response = self._client.post(self.url, json=payload, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Failed before a byte of the request left: nothing can have been delivered.
            return SendResult(
                outcome=Outcome.TEMPORARY,
                reason=f"Could not reach the provider at {self.url} ({type(exc).__name__}: {exc}); nothing was sent.",
                latency_ms=_ms(started),
                systemic=True,
            )
        except httpx.TimeoutException as exc:
            return SendResult(
                outcome=Outcome.UNKNOWN,
                reason=(
                    f"No response within {self.timeout:g} s after the request was sent ({type(exc).__name__}); "
                    "the provider may have delivered it. Retried with the same Idempotency-Key."
                ),
                latency_ms=_ms(started),
            )
        except httpx.TransportError as exc:
            return SendResult(
                outcome=Outcome.UNKNOWN,
                reason=(
                    f"The connection dropped after the request was sent ({type(exc).__name__}: {exc}); "
                    "the provider may have delivered it. Retried with the same Idempotency-Key."
                ),
                latency_ms=_ms(started),
            )
        return classify(response, latency_ms=_ms(started))


def classify(response: httpx.Response, *, latency_ms: int = 0) -> SendResult:
    """Turn an HTTP response into an outcome: 2xx delivered, 429/408/5xx temporary, other 4xx permanent."""
    status = response.status_code
    if 200 <= status < 300:
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return SendResult(
                outcome=Outcome.DELIVERED,
                http_status=status,
                latency_ms=latency_ms,
                reason=f"Delivered (HTTP {status}), but the response body was not valid JSON ({exc}): "
                f"{_snippet(response)!r}",
            )
        message_id = body.get("id", "") if isinstance(body, dict) else ""
        note = "" if isinstance(body, dict) else f"Delivered (HTTP {status}), but the body was not a JSON object."
        return SendResult(
            outcome=Outcome.DELIVERED,
            http_status=status,
            latency_ms=latency_ms,
            provider_message_id=str(message_id)[:200],
            reason=note,
        )
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("Retry-After"), response.headers.get("Date"))
        asked = f"Retry-After {retry_after:g} s" if retry_after is not None else "no usable Retry-After"
        return SendResult(
            outcome=Outcome.TEMPORARY,
            http_status=status,
            latency_ms=latency_ms,
            retry_after=retry_after,
            reason=f"Rate-limited by the provider (HTTP 429, {asked}).",
            systemic=True,
        )
    if status in (401, 403):
        # Our credentials, not this message: classed temporary (the message itself is fine) and fatal
        # for the batch, so the breaker stops before every row burns an attempt on a bad token.
        return SendResult(
            outcome=Outcome.TEMPORARY,
            http_status=status,
            latency_ms=latency_ms,
            reason=f"The provider refused our credentials (HTTP {status}); check WEAVE PUSH_TOKEN. "
            f"{_snippet(response)}".strip(),
            systemic=True,
            fatal=True,
        )
    if status == 408 or status >= 500:
        what = "timed out reading the request" if status == 408 else "failed"
        # Every temporary answer's Retry-After is honoured (a 503 during maintenance sends one too).
        retry_after = parse_retry_after(response.headers.get("Retry-After"), response.headers.get("Date"))
        asked = f" Retry-After {retry_after:g} s." if retry_after is not None else ""
        return SendResult(
            outcome=Outcome.TEMPORARY,
            http_status=status,
            latency_ms=latency_ms,
            retry_after=retry_after,
            reason=f"The provider {what} (HTTP {status}): {_snippet(response)}".rstrip(": ") + asked,
            systemic=status >= 500,
        )
    if status in (404, 410):
        return SendResult(
            outcome=Outcome.PERMANENT,
            http_status=status,
            latency_ms=latency_ms,
            reason=f"The device token is invalid or no longer registered (HTTP {status}): {_snippet(response)}".rstrip(
                ": "
            ),
        )
    return SendResult(
        outcome=Outcome.PERMANENT,
        http_status=status,
        latency_ms=latency_ms,
        reason=f"The provider rejected the notification (HTTP {status}): {_snippet(response)}".rstrip(": "),
    )


def _ms(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))

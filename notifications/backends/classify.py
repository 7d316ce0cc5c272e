"""Answers every backend classifies the same way: failed exchanges, redirects, throttling, server errors.

Pure functions from a `CappedResponse` / `ExchangeFailed` to a `SendResult`; the provider-specific
cases (a token-level refusal, an auth error in the provider's own JSON) stay in each backend.
"""

from dataclasses import replace

from notifications.backends.base import Outcome, SendResult
from notifications.backends.http import CappedResponse, ExchangeFailed


def failed_exchange(exc: ExchangeFailed, *, where: str) -> SendResult:
    """Classify an exchange with no complete answer: nothing sent is temporary, maybe sent is unknown."""
    if exc.kind == "refused":
        # HTTP/2 guarantees the stream was not processed: nothing can have been delivered.
        return _unsent(
            exc, f"The provider at {where} did not process the request: {exc.detail}; nothing was delivered."
        )
    if not exc.sent and exc.kind == "stalled":
        # The deadline passed before the request could leave: a slow or saturated provider.
        return _unsent(
            exc, f"No request left for {where} within {exc.deadline:g} s (still {exc.phase}); nothing was sent."
        )
    if not exc.sent:
        # Failed before a byte of the request left: nothing can have been delivered, and the provider
        # (or the network to it) is down for everyone.
        return _unsent(
            exc, f"Could not reach the provider at {where}, stopped {exc.phase} ({exc.detail}); nothing was sent."
        )
    if exc.kind == "timeout":
        why = f"No response within {exc.deadline:g} s after the request was sent ({exc.detail})"
    else:
        why = f"The connection dropped after the request was sent ({exc.detail})"
    return SendResult(
        outcome=Outcome.UNKNOWN,
        reason=f"{why}; the provider may have delivered it. Retried with the same idempotency key.",
        latency_ms=exc.latency_ms,
        incident=exc.incident,
    )


def _unsent(exc: ExchangeFailed, reason: str) -> SendResult:
    """A temporary failure that counts against the provider, with nothing delivered."""
    return SendResult(
        outcome=Outcome.TEMPORARY,
        reason=reason,
        latency_ms=exc.latency_ms,
        systemic=True,
        sent=False,
        incident=exc.incident,
    )


def redirect(response: CappedResponse, *, where: str, secrets: list[str]) -> SendResult:
    """A 3xx is never followed and never the message's fault: a misconfigured URL that stops the batch."""
    location = response.location(secrets=secrets) or "(no Location header)"
    return SendResult(
        outcome=Outcome.TEMPORARY,
        http_status=response.status,
        latency_ms=response.latency_ms,
        reason=(
            f"The provider at {where} answered HTTP {response.status} redirecting to {location}; redirects "
            "are never followed. Fix the configured URL."
        ),
        systemic=True,
        fatal=True,
    )


def throttled_or_unavailable(response: CappedResponse, *, what: str, secrets: list[str]) -> SendResult:
    """429 and 5xx (and 408): temporary; Retry-After honoured on 429 and 503; systemic except 408."""
    status = response.status
    retry_after = response.retry_after() if status in (429, 503) else None
    asked = ""
    if retry_after is not None:
        asked = f", Retry-After {retry_after:g} s"
    elif status == 429 or (status == 503 and "Retry-After" in response.headers):
        asked = ", no usable Retry-After"
    body = response.snippet(secrets=secrets)
    return SendResult(
        outcome=Outcome.TEMPORARY,
        http_status=status,
        latency_ms=response.latency_ms,
        retry_after=retry_after,
        reason=f"{what} (HTTP {status}{asked}){': ' + body if body else ''}.",
        systemic=status != 408,
    )


def throttled_subscription(response: CappedResponse, *, where: str, secrets: list[str]) -> SendResult:
    """A 429 about one destination (a Web Push subscription): temporary, its Retry-After kept for that row,
    and not systemic: one heavily pushed subscriber must not hold everyone else on the same service."""
    result = throttled_or_unavailable(response, what=f"{where} is throttling this subscription", secrets=secrets)
    return replace(result, systemic=False)

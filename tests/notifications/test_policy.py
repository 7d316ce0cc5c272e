"""The pure delivery policy: answers (httpx.MockTransport, no database, no network) -> transitions and breaker."""

import asyncio
import random

import httpx
import pytest

from notifications.backends import Outcome, PushMessage, SendResult
from notifications.backends.webhook import WebhookBackend
from notifications.delivery.breaker import BreakerRule, CircuitBreaker
from notifications.delivery.policy import PastAttempt, decide, safe_result, story
from weave.jobs import RetryPolicy

POLICY = RetryPolicy(max_attempts=3, backoff=2.0, backoff_max=600.0)
MESSAGE = PushMessage(idempotency_key="k", token="device", title="t", body="b")


def answer(response: httpx.Response) -> SendResult:
    async def run() -> SendResult:
        backend = WebhookBackend(
            alias="default",
            options={"url": "https://push.example/send", "token": "s3cret-token"},
            timeout=1,
            concurrency=1,
        )
        backend._client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: response))
        try:
            return await backend.send(MESSAGE)
        finally:
            await backend.aclose()

    return asyncio.run(run())


def transition(response: httpx.Response, attempts_before: int = 0):
    return decide(answer(response), attempts_before=attempts_before, policy=POLICY, rng=random.Random(1))


def test_delivered__no_delay_and_the_id_kept():
    t = transition(httpx.Response(200, json={"id": "m-1"}))
    assert (t.status, t.number, t.event, t.delay, t.last_error) == ("delivered", 1, "delivered", None, "")


@pytest.mark.parametrize(
    ("status", "event", "low", "high"), [(503, "retry", 1, 2), (500, "retry", 1, 2), (408, "retry", 1, 2)]
)
def test_temporary__backoff_with_equal_jitter(status, event, low, high):
    t = transition(httpx.Response(status), attempts_before=0)
    assert (t.status, t.event) == ("pending", event)
    assert low <= t.delay <= high
    assert "Attempt 1 of 3" in t.last_error


def test_retry_after__wins_over_backoff_and_is_capped():
    assert transition(httpx.Response(429, headers={"Retry-After": "30"})).delay == 30
    assert transition(httpx.Response(503, headers={"Retry-After": "99999"})).delay == 600


def test_permanent__fails_at_once_and_a_dead_token_deactivates():
    gone = transition(httpx.Response(410))
    rejected = transition(httpx.Response(400))
    assert (gone.status, gone.deactivate_device, rejected.status, rejected.deactivate_device) == (
        "failed",
        True,
        "failed",
        False,
    )


def test_out_of_attempts__failed_with_the_story_from_stored_fields():
    result = answer(httpx.Response(503))
    t = decide(result, attempts_before=2, policy=POLICY, rng=random.Random(1))
    assert (t.status, t.exhausted, t.delay) == ("failed", True, None)
    text = story(
        t.last_error, [PastAttempt(1, "temporary", "first"), PastAttempt(2, "unknown", "second")], result, t.number
    )
    lines = text.splitlines()
    assert lines[0].startswith("Gave up after 3 attempts") and "may have delivered it" in lines[0]
    assert lines[1:3] == ["1. temporary: first", "2. unknown: second"]
    assert lines[3].startswith("3. temporary: The provider failed (HTTP 503")


def test_redirect__systemic_and_fatal_never_permanent():
    result = answer(httpx.Response(302, headers={"Location": "https://elsewhere/"}))
    breaker = CircuitBreaker()
    assert breaker.record(result, now=0.0) is True
    assert decide(result, attempts_before=0, policy=POLICY, rng=random.Random(1)).status == "pending"


def test_breaker__holds_rows_back_as_long_as_the_provider_asked():
    breaker = CircuitBreaker(BreakerRule(min_answers=2, cooldown=30, cap=600))
    throttled = answer(httpx.Response(429, headers={"Retry-After": "120"}))
    breaker.record(throttled, now=0.0)
    assert breaker.record(throttled, now=0.0) is True
    assert breaker.seconds_open(now=0.0) == 120


def test_safe_result__a_careless_backend_cannot_store_nul_or_a_secret():
    raw = SendResult(
        outcome=Outcome.PERMANENT, reason="bad\x00token s3cret-token\nevent=forged", provider_message_id="\x00"
    )
    safe = safe_result(raw, ["s3cret-token"])
    assert "\x00" not in safe.reason + safe.provider_message_id and "\n" not in safe.reason
    assert "s3cret-token" not in safe.reason and "[redacted]" in safe.reason

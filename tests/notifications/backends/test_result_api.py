"""The small contract the pipeline builds on: `SendResult.sent` and `PushBackend.breaker_scope()`."""

import json

import pytest

from notifications.backends.base import Outcome, PushMessage, SendResult
from notifications.backends.webhook import WebhookBackend
from notifications.backends.webpush import origin_of


def test_sent_defaults_to_the_cautious_answer() -> None:
    assert SendResult(outcome=Outcome.TEMPORARY).sent is True


@pytest.mark.parametrize("outcome", [Outcome.UNKNOWN, Outcome.DELIVERED])
def test_unknown_or_delivered_cannot_claim_nothing_was_sent(outcome: Outcome) -> None:
    with pytest.raises(ValueError):
        SendResult(outcome=outcome, sent=False)


def test_nothing_sent_is_a_temporary_or_permanent_outcome() -> None:
    assert SendResult(outcome=Outcome.TEMPORARY, sent=False).sent is False
    assert SendResult(outcome=Outcome.PERMANENT, sent=False).sent is False


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://Push.Example.com/abc", "https://push.example.com:443"),
        ("https://user:pw@push.example.com:8443/x?y", "https://push.example.com:8443"),
        ("http://127.0.0.1/x", "http://127.0.0.1:80"),
        ("https://[::1]:9/x", "https://[::1]:9"),
    ],
)
def test_origin_of(url: str, origin: str) -> None:
    assert origin_of(url) == origin


def test_breaker_scope(webpush_backend) -> None:  # type: ignore[no-untyped-def]
    webhook_backend = WebhookBackend(alias="w", options={"url": "http://127.0.0.1:9/"}, timeout=1, concurrency=1)
    keys = {"p256dh": "B" + "A" * 86, "auth": "A" * 22}
    token = json.dumps({"endpoint": "https://push.example.net/sub/1", "keys": keys})
    message = PushMessage(idempotency_key="k", token=token, title="t", body="b")
    assert webpush_backend.breaker_scope(message) == "https://push.example.net:443"
    assert webpush_backend.breaker_scope(PushMessage(idempotency_key="k", token="junk", title="t", body="b")) == ""
    assert webhook_backend.breaker_scope(message) == ""


def test_hold_scope_is_the_deprecated_name_of_breaker_scope(webpush_backend) -> None:  # type: ignore[no-untyped-def]
    keys = {"p256dh": "B" + "A" * 86, "auth": "A" * 22}
    token = json.dumps({"endpoint": "https://push.example.net/sub/1", "keys": keys})
    message = PushMessage(idempotency_key="k", token=token, title="t", body="b")
    assert webpush_backend.hold_scope(message) == "https://push.example.net:443"

    class OldStyle(WebhookBackend):
        def hold_scope(self, message: PushMessage) -> str:
            return "its own"

    old = OldStyle(alias="w", options={"url": "http://127.0.0.1:9/"}, timeout=1, concurrency=1)
    with pytest.warns(DeprecationWarning, match="breaker_scope"):
        assert old.breaker_scope(message) == "its own"

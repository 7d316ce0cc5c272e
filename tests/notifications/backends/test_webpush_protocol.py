"""Web Push against the local push service: VAPID checked, every payload decrypted with the subscriber's key."""

from datetime import UTC, datetime, timedelta

from notifications.backends.base import Outcome
from notifications.backends.webpush import WebPushBackend
from notifications.testing.keys import TestKeys

from .conftest import TIMEOUT, message, run, send_all


def test_webpush__the_push_service_decrypts_what_was_sent(webpush, webpush_backend):
    subscription = webpush.subscription("alice-laptop")
    sent = message(subscription.as_token(), data={"order": 42})

    (result,) = run(send_all(webpush_backend, [sent]))

    assert (result.outcome, result.http_status) == (Outcome.DELIVERED, 201)
    # The fake on 127.0.0.1 is outside the known push services: its Location is not kept.
    assert result.provider_message_id == ""
    assert webpush.plaintexts() == [
        {"title": "Hello", "body": "World", "data": {"order": 42}, "tag": sent.idempotency_key}
    ]
    assert webpush.stats()["http_versions"] == {"2": 1}


def test_webpush__headers_carry_ttl_urgency_and_a_topic_from_the_key(webpush, webpush_backend):
    expires = datetime.now(UTC) + timedelta(seconds=120)
    sent = message(webpush.subscription("bob").as_token(), priority="high", expires_at=expires)

    run(send_all(webpush_backend, [sent]))

    (delivery,) = webpush.deliveries()
    assert 110 <= int(delivery.headers["ttl"]) <= 120
    assert delivery.headers["urgency"] == "high"
    assert delivery.headers["topic"] == sent.idempotency_key.replace("-", "")
    assert delivery.headers["content-encoding"] == "aes128gcm"


def test_webpush__every_send_is_encrypted_afresh(webpush, webpush_backend):
    sent = message(webpush.subscription("carol").as_token())

    run(send_all(webpush_backend, [sent, sent]))

    first, second = webpush.deliveries()
    assert first.message == second.message
    assert webpush.stats()["shown"] == 1  # same Topic: the second replaced the first


def test_webpush__gone_and_expired_subscriptions_are_token_invalid(webpush, webpush_backend):
    webpush.unsubscribe("dave")
    tokens = [webpush.subscription(s).as_token() for s in ("dave", "gone-erin", "expired-frank")]

    results = run(send_all(webpush_backend, [message(t) for t in tokens]))

    assert [r.http_status for r in results] == [410, 410, 404]
    assert all((r.outcome, r.token_invalid, r.systemic) == (Outcome.PERMANENT, True, False) for r in results)


def test_webpush__a_vapid_key_the_subscription_was_not_made_with_stops_the_batch(webpush, webpush_options, tmp_path):
    other = TestKeys.create(tmp_path)
    backend = WebPushBackend(
        alias="webpush",
        options={**webpush_options, "vapid_private_key_file": str(other.vapid_private_key_file)},
        timeout=TIMEOUT,
        concurrency=2,
    )

    (result,) = run(send_all(backend, [message(webpush.subscription("gina").as_token())]))

    assert (result.outcome, result.http_status, result.fatal, result.systemic) == (Outcome.TEMPORARY, 403, True, True)
    assert webpush.stats()["requests"] == 2  # signed again once, then gave up
    assert webpush.stats()["delivered"] == 0


def test_webpush__a_malformed_subscription_is_token_invalid_without_a_request(webpush, webpush_backend):
    (result,) = run(send_all(webpush_backend, [message('{"endpoint": "nope"}')]))

    assert (result.outcome, result.token_invalid) == (Outcome.PERMANENT, True)
    assert webpush.stats()["requests"] == 0


def test_webpush__throttling_holds_only_its_subscription_with_retry_after(webpush, webpush_backend):
    webpush.configure(script=["TooManyRequests"], retry_after="12")

    (result,) = run(send_all(webpush_backend, [message(webpush.subscription("hank").as_token())]))

    # A 429 speaks for one subscription: its row waits 12 s; the push service's breaker does not count it.
    assert (result.outcome, result.systemic, result.retry_after) == (Outcome.TEMPORARY, False, 12.0)


def test_webpush__the_destination_policy_is_applied_at_each_send_by_the_same_backend(
    webpush, webpush_backend, settings
):
    # The backend remembers the subscriptions it checked, per policy: once the loopback opt-in is
    # withdrawn, the next send to the same subscription is refused before anything leaves.
    sent = message(webpush.subscription("hana").as_token())
    (first,) = run(send_all(webpush_backend, [sent]))
    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": False}

    (second,) = run(send_all(webpush_backend, [sent]))

    assert first.outcome == Outcome.DELIVERED
    assert (second.outcome, second.sent, second.token_invalid) == (Outcome.PERMANENT, False, False)
    assert len(webpush.deliveries()) == 1

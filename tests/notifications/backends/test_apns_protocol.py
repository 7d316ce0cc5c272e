"""APNs against the local fake: HTTP/2 only over TLS, a reused ES256 provider token, Apple's reason strings."""

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from notifications.backends.apns import APNsBackend
from notifications.backends.base import Outcome

from .conftest import TIMEOUT, message, run, send_all

TOKEN = "ab" * 32


def test_apns__delivers_over_http2_with_an_empty_body_and_echoes_apns_id(apns, apns_backend):
    sent = message(TOKEN)

    (result,) = run(send_all(apns_backend, [sent]))

    assert (result.outcome, result.http_status) == (Outcome.DELIVERED, 200)
    assert result.provider_message_id == sent.idempotency_key
    assert apns.stats()["http_versions"] == {"2": 1}


def test_apns__headers_map_key_collapse_priority_and_remaining_ttl(apns, apns_backend):
    expires = datetime.now(UTC) + timedelta(seconds=300)
    sent = message(TOKEN, priority="high", expires_at=expires, data={"order": 42})

    run(send_all(apns_backend, [sent]))

    (delivery,) = apns.deliveries()
    headers = delivery.headers
    assert headers["apns-id"] == sent.idempotency_key
    assert headers["apns-collapse-id"] == sent.idempotency_key
    assert headers["apns-priority"] == "10"
    assert headers["apns-push-type"] == "alert"
    assert headers["apns-topic"] == "com.example.weave"
    assert abs(int(headers["apns-expiration"]) - expires.timestamp()) <= 2
    assert delivery.message == {"order": 42, "aps": {"alert": {"title": "Hello", "body": "World"}}}


def test_apns__one_provider_token_serves_a_concurrent_batch_and_later_batches(apns, apns_options):
    apns.min_token_interval = 3600  # like Apple: a new token every few seconds would be refused
    apns.configure(latency_ms=100)

    first = run(send_all(APNsBackend(alias="apns", options=apns_options, timeout=TIMEOUT, concurrency=20),
                         [message(TOKEN) for _ in range(20)]))  # fmt: skip
    second = run(send_all(APNsBackend(alias="apns", options=apns_options, timeout=TIMEOUT, concurrency=20),
                          [message(TOKEN) for _ in range(5)]))  # fmt: skip

    assert {r.outcome for r in first + second} == {Outcome.DELIVERED}
    assert apns.stats()["provider_tokens"] == 1
    stats = apns.stats()
    assert stats["max_in_flight"] >= 2  # several streams in flight at once...
    assert stats["connections"] == 2  # ...multiplexed on one connection per backend instance


def test_apns__an_expired_provider_token_is_replaced_once_and_the_message_sent(apns, apns_backend):
    run(send_all(APNsBackend(alias="apns", options=apns_backend.options, timeout=TIMEOUT, concurrency=2),
                 [message(TOKEN)]))  # fmt: skip
    apns.expire_provider_tokens()

    (result,) = run(send_all(apns_backend, [message(TOKEN)]))

    assert result.outcome == Outcome.DELIVERED
    assert apns.stats()["by_reason"] == {"ExpiredProviderToken": 1}
    assert apns.stats()["provider_tokens"] == 2


@pytest.mark.parametrize("reason", ["ExpiredProviderToken", "InvalidProviderToken"])
def test_apns__a_provider_token_refused_twice_opens_the_breaker(apns, apns_backend, reason):
    apns.configure(script=[reason, reason])

    (result,) = run(send_all(apns_backend, [message(TOKEN)]))

    assert (result.outcome, result.http_status, result.systemic, result.fatal) == (Outcome.TEMPORARY, 403, True, True)
    assert reason in result.reason
    assert apns.stats()["requests"] == 2


def test_apns__token_level_reasons_deactivate_the_device_and_are_never_systemic(apns, apns_backend):
    apns.unregister("cd" * 32)
    results = run(send_all(apns_backend, [message("cd" * 32), message("not-hex"), message("0ff1ce" + "1" * 58)]))

    assert [r.http_status for r in results] == [410, 400, 400]
    assert ["Unregistered" in results[0].reason, "BadDeviceToken" in results[1].reason] == [True, True]
    assert "DeviceTokenNotForTopic" in results[2].reason
    for result in results:
        assert (result.outcome, result.token_invalid, result.systemic, result.fatal) == (
            Outcome.PERMANENT,
            True,
            False,
            False,
        )
    assert "since" in results[0].reason  # Apple's timestamp of the unregistration


def test_apns__a_random_live_token_never_carries_a_prefix_the_fake_gives_a_meaning_to():
    # Of tokens drawn as 64 random hex digits, about one in 65,536 starts with `dead`: 100,000 such draws
    # hold one with a chance of about 78 %.
    from notifications.testing.fake_apns import live_token

    drawn = [live_token() for _ in range(100_000)]

    assert all(len(t) == 64 and set(t) <= set("0123456789abcdef") for t in drawn)
    assert [t for t in drawn if t.startswith(("dead", "0ff1ce"))] == []
    assert len(set(drawn)) == len(drawn)


def test_apns__too_many_requests_concerns_one_device_token_only(apns, apns_backend):
    apns.configure(script=["TooManyRequests"], retry_after="60")

    (result,) = run(send_all(apns_backend, [message(TOKEN)]))

    assert (result.outcome, result.http_status, result.systemic, result.token_invalid) == (
        Outcome.TEMPORARY,
        429,
        False,
        False,
    )
    assert result.retry_after == 60.0


@pytest.mark.parametrize(("reason", "status"), [("InternalServerError", 500), ("ServiceUnavailable", 503)])
def test_apns__server_trouble_is_systemic(apns, apns_backend, reason, status):
    apns.configure(script=[reason], retry_after="5")

    (result,) = run(send_all(apns_backend, [message(TOKEN)]))

    assert (result.outcome, result.http_status, result.systemic, result.fatal) == (
        Outcome.TEMPORARY,
        status,
        True,
        False,
    )


def test_apns__a_wrong_topic_stops_the_batch(apns, apns_options):
    backend = APNsBackend(alias="apns", options={**apns_options, "topic": "com.other"}, timeout=TIMEOUT, concurrency=2)

    (result,) = run(send_all(backend, [message(TOKEN)]))

    assert (result.outcome, result.fatal) == (Outcome.TEMPORARY, True)
    assert "TopicDisallowed" in result.reason


def test_apns__the_fake_refuses_http1(apns, keys):
    import ssl

    context = ssl.create_default_context(cafile=str(keys.ca_file))
    with httpx.Client(http1=True, http2=False, verify=context) as client:
        response = client.post(f"{apns.url}/3/device/{TOKEN}", content=b"{}")
    assert response.status_code == 505


def test_apns__a_data_only_message_is_a_background_push_at_priority_5(apns, apns_backend):
    run(send_all(apns_backend, [message(TOKEN, title="", body="", priority="high", idempotency_key=str(uuid.uuid4()))]))

    (delivery,) = apns.deliveries()
    assert delivery.headers["apns-push-type"] == "background"
    assert delivery.headers["apns-priority"] == "5"
    assert delivery.message == {"aps": {"content-available": 1}}

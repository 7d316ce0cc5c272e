"""FCM v1 against the local fake: OAuth2 with the service account, the v1 schema, FCM's own errors, HTTP/2."""

import json
from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from notifications.backends.base import Outcome
from notifications.backends.fcm import FCMBackend

from .conftest import TIMEOUT, message, run, send_all

TOKEN = "fcm-token-" + "a" * 40


def test_fcm__delivers_over_http2_with_one_access_token_for_a_concurrent_batch(fcm, fcm_backend):
    results = run(send_all(fcm_backend, [message(f"{TOKEN}{i}") for i in range(12)]))

    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert all(r.provider_message_id.startswith("projects/weave-fake-project/messages/") for r in results)
    stats = fcm.stats()
    assert stats["http_versions"] == {"2": 12}
    # Twelve sends at once, one token fetch: the refresh is shared, not raced.
    assert stats["token_requests"] == 1
    assert stats["token_refusals"] == []


def test_fcm__message_carries_collapse_tag_ttl_and_priority_in_every_platform_block(fcm, fcm_backend):
    expires = datetime.now(UTC) + timedelta(seconds=600)
    sent = message(TOKEN, data={"order": "42"}, priority="high", expires_at=expires)

    (result,) = run(send_all(fcm_backend, [sent]))

    assert result.outcome == Outcome.DELIVERED
    (delivery,) = fcm.deliveries()
    body = delivery.message
    assert body["data"] == {"order": "42"}
    assert body["notification"] == {"title": "Hello", "body": "World"}
    android = body["android"]
    assert android["priority"] == "HIGH"
    assert android["notification"]["tag"] == sent.idempotency_key  # a resend replaces, never stacks
    assert "collapse_key" not in android  # no site collapse key: FCM's 4-key limit is not spent per message
    assert 590 <= int(android["ttl"].rstrip("s")) <= 600
    apns_headers = body["apns"]["headers"]
    assert apns_headers["apns-priority"] == "10"
    assert apns_headers["apns-collapse-id"] == sent.idempotency_key
    assert abs(int(apns_headers["apns-expiration"]) - expires.timestamp()) <= 2
    assert body["webpush"]["headers"]["Urgency"] == "high"
    assert 590 <= int(body["webpush"]["headers"]["TTL"]) <= 600


def test_fcm__a_site_collapse_key_goes_to_collapse_key_and_tag(fcm, fcm_backend):
    run(send_all(fcm_backend, [message(TOKEN, collapse_key="score"), message(TOKEN, collapse_key="score")]))

    deliveries = fcm.deliveries()
    assert [d.message["android"]["collapse_key"] for d in deliveries] == ["score", "score"]
    assert fcm.stats()["shown"] == 1  # the second replaced the first on the device


def test_fcm__resend_of_the_same_notification_replaces_it_on_the_device(fcm, fcm_backend):
    sent = message(TOKEN)
    run(send_all(fcm_backend, [sent, sent]))

    assert fcm.stats()["delivered"] == 2  # FCM has no idempotency key: both copies go out...
    assert fcm.stats()["shown"] == 1  # ...but the device shows one (same tag)


def test_fcm__token_level_errors_mark_the_token_invalid_and_are_never_systemic(fcm, fcm_backend):
    fcm.unregister(TOKEN + "gone")
    results = run(
        send_all(
            fcm_backend,
            [
                message(TOKEN + "gone"),
                message("dead-" + "x" * 30),
                message("foreign-" + "y" * 30),
                message("bad token!"),
            ],
        )
    )

    assert [r.http_status for r in results] == [404, 404, 403, 400]
    for result in results:
        assert (result.outcome, result.token_invalid, result.systemic, result.fatal) == (
            Outcome.PERMANENT,
            True,
            False,
            False,
        )
    assert "UNREGISTERED" in results[0].reason and "SENDER_ID_MISMATCH" in results[2].reason


def test_fcm__non_string_data_is_refused_by_the_schema_but_does_not_kill_the_token(fcm, fcm_backend):
    (result,) = run(send_all(fcm_backend, [message(TOKEN, data={"count": 3})]))

    assert (result.outcome, result.http_status, result.token_invalid) == (Outcome.PERMANENT, 400, False)
    assert "message.data[count]" in result.reason


def test_fcm__quota_and_outages_are_systemic_and_honour_retry_after(fcm, fcm_backend):
    fcm.configure(script=["QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"], retry_after="30")
    results = [run(send_all(FCMBackend(**_args(fcm_backend)), [message(TOKEN)]))[0] for _ in range(3)]

    assert [r.http_status for r in results] == [429, 503, 500]
    for result in results:
        assert (result.outcome, result.systemic, result.fatal, result.token_invalid) == (
            Outcome.TEMPORARY,
            True,
            False,
            False,
        )
    assert [r.retry_after for r in results[:2]] == [30.0, 30.0]


def test_fcm__a_401_refreshes_the_token_once_and_sends_again(fcm, fcm_backend):
    run(send_all(FCMBackend(**_args(fcm_backend)), [message(TOKEN)]))
    fcm.revoke_access_tokens()

    (result,) = run(send_all(fcm_backend, [message(TOKEN)]))

    assert result.outcome == Outcome.DELIVERED
    assert fcm.stats()["token_requests"] == 2
    assert fcm.stats()["by_status"] == {"200": 2, "401": 1}


def test_fcm__a_second_401_after_refreshing_opens_the_breaker(fcm, fcm_backend):
    fcm.configure(script=["UNAUTHENTICATED", "UNAUTHENTICATED"])

    (result,) = run(send_all(fcm_backend, [message(TOKEN)]))

    assert (result.outcome, result.http_status, result.systemic, result.fatal) == (Outcome.TEMPORARY, 401, True, True)
    assert "even after it was refreshed" in result.reason
    assert fcm.stats()["requests"] == 2  # exactly one retry


def test_fcm__a_service_account_with_the_wrong_key_is_refused_at_the_token_endpoint(fcm, fcm_options, tmp_path):
    info = json.loads(open(fcm_options["credentials_file"]).read())
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    info["private_key"] = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(info))
    backend = FCMBackend(
        alias="fcm", options={**fcm_options, "credentials_file": str(forged)}, timeout=TIMEOUT, concurrency=2
    )

    (result,) = run(send_all(backend, [message(TOKEN)]))

    assert (result.outcome, result.fatal, result.systemic) == (Outcome.TEMPORARY, True, True)
    assert "refused the service account" in result.reason
    assert fcm.stats()["requests"] == 0  # nothing was sent
    assert any("Signature" in r for r in fcm.stats()["token_refusals"])
    assert "PRIVATE KEY" not in result.reason


def test_fcm__an_expired_message_is_not_sent(fcm, fcm_backend):
    (result,) = run(send_all(fcm_backend, [message(TOKEN, expires_at=datetime.now(UTC) - timedelta(seconds=1))]))

    assert result.outcome == Outcome.PERMANENT and "expired" in result.reason
    assert fcm.stats()["requests"] == 0


def test_fcm__a_hung_request_is_unknown(fcm, fcm_options):
    fcm.configure(rate_hang=1.0, hang_seconds=3.0)
    backend = FCMBackend(alias="fcm", options=fcm_options, timeout=1.0, concurrency=2)

    (result,) = run(send_all(backend, [message(TOKEN)]))

    assert result.outcome == Outcome.UNKNOWN
    assert fcm.stats()["delivered"] == 1  # it did arrive: exactly why the outcome is not "temporary"


def _args(backend):
    return {"alias": backend.alias, "options": backend.options, "timeout": backend.timeout, "concurrency": 2}

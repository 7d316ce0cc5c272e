"""Per-provider classification as pure policy: httpx.MockTransport answers, no fakes, no database."""

import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifications.backends.apns import APNsBackend, classify_apns
from notifications.backends.base import Outcome
from notifications.backends.fcm import FCMBackend, classify_fcm
from notifications.backends.http import CappedResponse
from notifications.backends.webpush import WebPushBackend, classify_webpush

from .conftest import message, run

FCM_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"


def fcm_error(status, rpc, code=None, field=None, text="x"):
    details = [{"@type": FCM_TYPE, "errorCode": code}] if code else []
    if field:
        details.append({"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [{"field": field}]})
    return httpx.Response(status, json={"error": {"code": status, "message": text, "status": rpc, "details": details}})


class StubToken:
    """Stands in for the google-auth token: counts refreshes, never touches the network."""

    def __init__(self):
        self.refreshes = 0

    def current(self):
        return f"token-{self.refreshes}"

    async def aget(self, *, refused=None, deadline):
        self.refreshes += 1
        return self.current()


def fcm_send(handler, fcm_options):
    async def go():
        backend = FCMBackend(alias="fcm", options=fcm_options, timeout=2, concurrency=2)
        backend.credentials = StubToken()
        backend._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            return await backend.send(message("fcm-token-" + "a" * 30))
        finally:
            await backend.aclose()

    return run(go())


@pytest.mark.parametrize(
    ("response", "outcome", "token_invalid", "systemic", "fatal"),
    [
        (httpx.Response(200, json={"name": "projects/p/messages/1"}), Outcome.DELIVERED, False, False, False),
        (fcm_error(404, "NOT_FOUND", "UNREGISTERED"), Outcome.PERMANENT, True, False, False),
        (fcm_error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"), Outcome.PERMANENT, True, False, False),
        (fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", field="message.token"), Outcome.PERMANENT, True,
         False, False),
        (fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", field="message.data[x]"), Outcome.PERMANENT, False,
         False, False),
        (fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED"), Outcome.TEMPORARY, False, True, False),
        (fcm_error(503, "UNAVAILABLE", "UNAVAILABLE"), Outcome.TEMPORARY, False, True, False),
        (fcm_error(500, "INTERNAL", "INTERNAL"), Outcome.TEMPORARY, False, True, False),
        (fcm_error(403, "PERMISSION_DENIED"), Outcome.TEMPORARY, False, True, True),
        (fcm_error(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR"), Outcome.TEMPORARY, False, True, True),
        (httpx.Response(404, text="<html>no such page</html>"), Outcome.TEMPORARY, False, True, True),
        (httpx.Response(302, headers={"Location": "https://elsewhere/"}), Outcome.TEMPORARY, False, True, True),
    ],
)  # fmt: skip
def test_fcm__classification(fcm_options, response, outcome, token_invalid, systemic, fatal):
    result = fcm_send(lambda request: response, fcm_options)
    assert (result.outcome, result.token_invalid, result.systemic, result.fatal) == (
        outcome,
        token_invalid,
        systemic,
        fatal,
    )


def test_fcm__401_refreshes_once_then_succeeds(fcm_options):
    seen = []

    def handler(request):
        seen.append(request.headers["Authorization"])
        return fcm_error(401, "UNAUTHENTICATED") if len(seen) == 1 else httpx.Response(200, json={"name": "n"})

    result = fcm_send(handler, fcm_options)
    assert result.outcome == Outcome.DELIVERED
    assert seen == ["Bearer token-0", "Bearer token-1"]


def test_fcm__retry_after_on_quota(fcm_options):
    response = fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED")
    response.headers["Retry-After"] = "17"
    assert fcm_send(lambda request: response, fcm_options).retry_after == 17.0


def test_fcm__the_access_token_never_appears_in_a_reason(fcm_options):
    def handler(request):
        token = request.headers["Authorization"].split()[1]
        return httpx.Response(400, json={"error": {"code": 400, "message": f"bad token {token}", "status": "X"}})

    result = fcm_send(handler, fcm_options)
    assert "token-0" not in result.reason and "[redacted]" in result.reason


def apns_send(handler, apns_options):
    async def go():
        backend = APNsBackend(alias="apns", options=apns_options, timeout=2, concurrency=2)
        backend._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            return await backend.send(message("ab" * 32))
        finally:
            await backend.aclose()

    return run(go())


def reason(status, text, **extra):
    return httpx.Response(status, json={"reason": text, **extra})


@pytest.mark.parametrize(
    ("response", "outcome", "token_invalid", "systemic", "fatal"),
    [
        (httpx.Response(200, headers={"apns-id": "x"}), Outcome.DELIVERED, False, False, False),
        (reason(410, "Unregistered", timestamp=1700000000000), Outcome.PERMANENT, True, False, False),
        (reason(400, "BadDeviceToken"), Outcome.PERMANENT, True, False, False),
        (reason(400, "DeviceTokenNotForTopic"), Outcome.PERMANENT, True, False, False),
        (reason(429, "TooManyRequests"), Outcome.TEMPORARY, False, False, False),
        (reason(429, "TooManyProviderTokenUpdates"), Outcome.TEMPORARY, False, True, False),
        (reason(500, "InternalServerError"), Outcome.TEMPORARY, False, True, False),
        (reason(503, "ServiceUnavailable"), Outcome.TEMPORARY, False, True, False),
        (reason(400, "TopicDisallowed"), Outcome.TEMPORARY, False, True, True),
        (reason(403, "BadCertificateEnvironment"), Outcome.TEMPORARY, False, True, True),
        (reason(400, "BadCollapseId"), Outcome.PERMANENT, False, False, False),
        (reason(413, "PayloadTooLarge"), Outcome.PERMANENT, False, False, False),
    ],
)
def test_apns__classification(apns_options, response, outcome, token_invalid, systemic, fatal):
    result = apns_send(lambda request: response, apns_options)
    assert (result.outcome, result.token_invalid, result.systemic, result.fatal) == (
        outcome,
        token_invalid,
        systemic,
        fatal,
    )


def test_apns__an_expired_provider_token_is_resigned_once(apns_options):
    seen = []

    def handler(request):
        seen.append(request.headers["authorization"])
        return reason(403, "ExpiredProviderToken") if len(seen) == 1 else httpx.Response(200)

    assert apns_send(handler, apns_options).outcome == Outcome.DELIVERED
    assert len(seen) == 2 and seen[0] != seen[1]


def webpush_send(handler, webpush_options, token):
    async def go():
        backend = WebPushBackend(alias="webpush", options=webpush_options, timeout=2, concurrency=2)
        backend._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            return await backend.send(message(token))
        finally:
            await backend.aclose()

    return run(go())


@pytest.mark.parametrize(
    ("status", "outcome", "token_invalid", "systemic", "fatal"),
    [
        (201, Outcome.DELIVERED, False, False, False),
        (404, Outcome.PERMANENT, True, False, False),
        (410, Outcome.PERMANENT, True, False, False),
        (413, Outcome.PERMANENT, False, False, False),
        (429, Outcome.TEMPORARY, False, False, False),  # about one subscription: never the origin's breaker
        (503, Outcome.TEMPORARY, False, True, False),
        (401, Outcome.TEMPORARY, False, True, True),
        (403, Outcome.TEMPORARY, False, True, True),
    ],
)
def test_webpush__classification(webpush_options, webpush, status, outcome, token_invalid, systemic, fatal):
    token = webpush.subscription("x").as_token()
    result = webpush_send(lambda request: httpx.Response(status), webpush_options, token)
    assert (result.outcome, result.token_invalid, result.systemic, result.fatal) == (
        outcome,
        token_invalid,
        systemic,
        fatal,
    )


CLASSIFIERS = [classify_fcm, classify_apns, classify_webpush]


@settings(max_examples=300, deadline=None)
@given(
    status=st.integers(min_value=100, max_value=599),
    body=st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda v: json.dumps(v).encode(),
            st.recursive(
                st.none() | st.text(max_size=20) | st.integers(),
                lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                max_leaves=10,
            ),
        ),  # fmt: skip
    ),
    classifier=st.sampled_from(CLASSIFIERS),
)
def test_classifiers__never_raise_and_never_call_a_token_dead_and_systemic_at_once(status, body, classifier):
    response = CappedResponse(status=status, headers=httpx.Headers(), body=body, truncated=False, latency_ms=1)

    result = classifier(response, secrets=["s3cret-value"])

    assert not (result.token_invalid and (result.systemic or result.fatal))
    assert "\n" not in result.reason
    assert (result.outcome == Outcome.DELIVERED) == (200 <= status < 300)


def test_webpush__a_delivery_keeps_the_location_of_a_known_push_service_only():
    # A 2xx is classified without reading its body; its Location is the message id, sanitized, when the
    # host is a known push service, and dropped (never copied anywhere) when it is not.
    secret = "sekrit-token-value"
    answer = CappedResponse(
        status=201,
        headers=httpx.Headers({"Location": f"https://user:pw@push.example/m/1?t={secret}\n", "TTL": "60"}),
        body=b"\x00 any body at all",
        truncated=True,
        latency_ms=3,
    )

    known = classify_webpush(answer, secrets=[secret], where="push.example", verbatim=True)
    outside = classify_webpush(answer, secrets=[secret], where="127.0.0.1:4433", verbatim=False)

    assert (known.outcome, known.http_status, outside.outcome) == (Outcome.DELIVERED, 201, Outcome.DELIVERED)
    assert known.provider_message_id.startswith("https://[redacted]@push.example/m/1?t=[redacted]")
    assert "pw" not in known.provider_message_id and "\n" not in known.provider_message_id
    assert (known.reason, outside.reason, outside.provider_message_id) == ("", "", "")


@pytest.mark.parametrize(
    ("status", "rpc"),
    [(408, "DEADLINE_EXCEEDED"), (408, None), (504, "DEADLINE_EXCEEDED")],
)
def test_fcm__a_timeout_status_is_temporary_and_never_blames_the_token(status, rpc):
    error = {"error": {"code": status, "message": "deadline exceeded", "status": rpc}} if rpc else None
    body = json.dumps(error).encode() if error else b""
    response = CappedResponse(status=status, headers=httpx.Headers(), body=body, truncated=False, latency_ms=1)

    result = classify_fcm(response, secrets=[])

    assert (result.outcome, result.token_invalid, result.fatal) == (Outcome.TEMPORARY, False, False)
    assert result.http_status == status and result.reason.startswith("FCM ")

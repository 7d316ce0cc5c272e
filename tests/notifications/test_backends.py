"""The backend interface: the webhook's wire format, its classification, the registry (httpx.MockTransport)."""

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from notifications.backends import Outcome, PushMessage, SendResult, backend_configs, backend_problems, get_backend
from notifications.backends.options import ttl_to_send
from notifications.backends.registry import backend_path
from notifications.backends.webhook import WebhookBackend

MESSAGE = PushMessage(idempotency_key="key-1", token="device-1", title="Hi", body="There", data={"n": 1})


def send_with(handler, message=MESSAGE, *, token="secret-token", url="https://push.example/send"):
    async def run():
        backend = WebhookBackend(alias="default", options={"url": url, "token": token}, timeout=2, concurrency=2)
        backend._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            return await backend.send(message)
        finally:
            await backend.aclose()

    return asyncio.run(run())


def test_webhook__wire_format_is_kept():
    seen = {}

    def handler(request):
        seen["request"] = request
        return httpx.Response(200, json={"id": "msg-1"})

    result = send_with(handler)
    request = seen["request"]
    assert json.loads(request.content) == {"to": "device-1", "title": "Hi", "body": "There", "data": {"n": 1}}
    assert request.headers["Authorization"] == "Bearer secret-token"
    assert request.headers["Idempotency-Key"] == "key-1"
    assert (result.outcome, result.provider_message_id, result.http_status) == (Outcome.DELIVERED, "msg-1", 200)


def test_webhook__without_a_token_no_authorization_header_is_sent():
    seen = {}

    def handler(request):
        seen["request"] = request
        return httpx.Response(200, json={"id": "msg-1"})

    result = send_with(handler, token="")
    assert "Authorization" not in seen["request"].headers
    assert result.outcome == Outcome.DELIVERED


def test_webhook__a_redirect_is_systemic_fatal_and_names_the_location_without_userinfo():
    result = send_with(lambda r: httpx.Response(301, headers={"Location": "https://bob:hunter22@elsewhere/x"}))
    assert (result.outcome, result.systemic, result.fatal) == (Outcome.TEMPORARY, True, True)
    assert "https://[redacted]@elsewhere/x" in result.reason
    assert "hunter22" not in result.reason


def test_webhook__an_echoed_credential_never_reaches_the_reason():
    result = send_with(
        lambda r: httpx.Response(401, content=b"bad Authorization: " + r.headers["Authorization"].encode())
    )
    assert result.fatal and "secret-token" not in result.reason


@pytest.mark.parametrize("status", [429, 503])
def test_webhook__retry_after_is_honoured_on_429_and_503(status):
    result = send_with(lambda r: httpx.Response(status, headers={"Retry-After": "12"}))
    assert (result.outcome, result.retry_after, result.systemic) == (Outcome.TEMPORARY, 12.0, True)


def test_webhook__410_marks_the_token_dead_404_does_not():
    gone = send_with(lambda r: httpx.Response(410))
    missing = send_with(lambda r: httpx.Response(404))
    assert (gone.outcome, gone.token_invalid) == (Outcome.PERMANENT, True)
    assert (missing.outcome, missing.token_invalid) == (Outcome.PERMANENT, False)


def test_send_result__a_dead_token_is_never_systemic():
    with pytest.raises(ValueError):
        SendResult(outcome=Outcome.PERMANENT, token_invalid=True, systemic=True)


def test_message__remaining_ttl_is_computed_at_send_time():
    now = datetime.now(UTC)
    message = PushMessage(idempotency_key="k", token="t", title="x", body="", expires_at=now + timedelta(seconds=90))
    assert ttl_to_send(message) in (89, 90)
    assert ttl_to_send(replace(message, expires_at=now - timedelta(seconds=200))) == 0  # expired: not sent
    assert ttl_to_send(replace(message, expires_at=now + timedelta(seconds=0.5))) == 1  # never "now or never"
    assert ttl_to_send(MESSAGE) is None


def test_registry__default_is_the_webhook_from_push_url(settings):
    settings.WEAVE = {"PUSH_URL": "https://push.example/send", "PUSH_TOKEN": "t0ken"}
    assert backend_configs() == {
        "default": {
            "BACKEND": "notifications.backends.webhook.WebhookBackend",
            "OPTIONS": {"url": "https://push.example/send", "token": "t0ken"},
        }
    }
    backend = get_backend("default")
    assert isinstance(backend, WebhookBackend) and backend.secrets() == ["t0ken"]


FCM_PATH = "notifications.backends.fcm.FCMBackend"


@pytest.mark.parametrize(
    "weave",
    [
        {},
        {"PUSH_URL": "https://push.example/send"},
        {"PUSH_BACKENDS": {}},
        {"PUSH_BACKENDS": {"fcm": {"BACKEND": FCM_PATH, "OPTIONS": {"project_id": "p"}}}},
        {"PUSH_BACKENDS": {"fcm": {"BACKEND": FCM_PATH}}, "PUSH_URL": "https://push.example/send"},
        {"PUSH_BACKENDS": {"default": {"BACKEND": FCM_PATH}, "empty": None, "bare": {}}},
        {"PUSH_BACKENDS": {"default": None}},
    ],
)
def test_registry__backend_path_is_what_backend_configs_names_for_every_alias(settings, weave):
    settings.WEAVE = weave
    configs = backend_configs()
    for alias in [*configs, "default", "fcm", "empty", "bare", "unknown"]:
        expected = configs[alias]["BACKEND"] if alias in configs else None
        assert backend_path(alias) == expected, alias


def test_registry__explicit_backends_and_their_problems(settings):
    settings.WEAVE = {
        "PUSH_BACKENDS": {
            "default": {"BACKEND": "notifications.backends.webhook.WebhookBackend", "OPTIONS": {"url": "ftp://x"}},
            "broken": {"BACKEND": "no.such.Backend"},
        }
    }
    problems = dict(backend_problems())
    assert "http:// or https://" in problems["default"]
    assert "Cannot import push backend" in problems["broken"]
    with pytest.raises(ImproperlyConfigured, match="No push backend 'fcm'"):
        get_backend("fcm")

"""Fixtures for the provider backends: generated keys, the three protocol fakes, and ready-made backends."""

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from notifications.backends.apns import APNsBackend
from notifications.backends.base import PushMessage
from notifications.backends.credentials import forget_shared
from notifications.backends.fcm import FCMBackend
from notifications.backends.webpush import WebPushBackend
from notifications.testing.fake_apns import FakeAPNs
from notifications.testing.fake_fcm import FakeFCM
from notifications.testing.fake_state import Faults
from notifications.testing.fake_webpush import FakeWebPush
from notifications.testing.keys import APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC, FCM_PROJECT_ID, TestKeys

T = TypeVar("T")
TIMEOUT = 5.0  # generous: a loaded CI machine must not turn a slow answer into a failed test


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def message(token: str, **fields: Any) -> PushMessage:
    return PushMessage(
        idempotency_key=fields.pop("idempotency_key", str(uuid.uuid4())),
        token=token,
        title=fields.pop("title", "Hello"),
        body=fields.pop("body", "World"),
        **fields,
    )


@pytest.fixture(scope="session")
def keys(tmp_path_factory) -> TestKeys:
    return TestKeys.create(tmp_path_factory.mktemp("push-keys"))


@pytest.fixture(autouse=True)
def _fresh_credentials():
    # Credentials are cached per process (as in production); each test starts without any.
    forget_shared()
    yield
    forget_shared()


def _clean(fake) -> None:
    fake.state.faults.__dict__.update(Faults().__dict__)
    fake.reset()


@pytest.fixture(scope="module")
def fcm_server(keys):
    with FakeFCM(keys) as fake:
        keys.set_token_uri(fake.token_uri)
        yield fake


@pytest.fixture
def fcm(fcm_server):
    _clean(fcm_server)
    fcm_server.dead.clear()
    return fcm_server


@pytest.fixture
def fcm_options(fcm, keys) -> dict[str, Any]:
    return {
        "project_id": FCM_PROJECT_ID,
        "credentials_file": str(keys.fcm_service_account),
        "base_url": fcm.url,
        "ca_file": str(keys.ca_file),
    }


@pytest.fixture
def fcm_backend(fcm_options):
    return FCMBackend(alias="fcm", options=fcm_options, timeout=TIMEOUT, concurrency=10)


@pytest.fixture(scope="module")
def apns_server(keys):
    with FakeAPNs(keys) as fake:
        yield fake


@pytest.fixture
def apns(apns_server):
    _clean(apns_server)
    apns_server.expired.clear()
    apns_server.min_token_interval = 0.0
    return apns_server


@pytest.fixture
def apns_options(apns, keys) -> dict[str, Any]:
    return {
        "team_id": APNS_TEAM_ID,
        "key_id": APNS_KEY_ID,
        "key_file": str(keys.apns_key_file),
        "topic": APNS_TOPIC,
        "host": apns.host_port,
        "ca_file": str(keys.ca_file),
    }


@pytest.fixture
def apns_backend(apns_options):
    return APNsBackend(alias="apns", options=apns_options, timeout=TIMEOUT, concurrency=10)


@pytest.fixture(scope="module")
def webpush_server(keys):
    with FakeWebPush(keys) as fake:
        yield fake


@pytest.fixture
def webpush(webpush_server):
    _clean(webpush_server)
    webpush_server.gone.clear()
    return webpush_server


@pytest.fixture
def webpush_options(webpush, keys, settings) -> dict[str, Any]:
    # The fake listens on 127.0.0.1, which the Web Push destination policy refuses unless told otherwise.
    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True}
    return {
        "vapid_private_key_file": str(keys.vapid_private_key_file),
        "vapid_subject": "mailto:ops@example.com",
        "ca_file": str(keys.ca_file),
    }


@pytest.fixture
def webpush_backend(webpush_options):
    return WebPushBackend(alias="webpush", options=webpush_options, timeout=TIMEOUT, concurrency=10)


async def send_all(backend, messages):
    try:
        return await asyncio.gather(*(backend.send(m) for m in messages))
    finally:
        await backend.aclose()

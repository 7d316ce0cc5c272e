"""Fixtures for the push tests: one real fake-provider HTTP server per module, reset per test."""

from dataclasses import asdict

import pytest

from notifications.fake_provider import FakePushProvider, FaultConfig

TOKEN = "test-token"


@pytest.fixture(scope="module")
def fake_server():
    with FakePushProvider() as server:
        yield server


@pytest.fixture
def fake(fake_server):
    """The fake provider with no faults and no history."""
    fake_server.configure(**asdict(FaultConfig()))
    fake_server.reset()
    return fake_server


@pytest.fixture
def push_settings(settings, fake):
    """WEAVE settings pointing at the fake provider, with a timeout a loaded machine cannot hit by accident."""
    settings.WEAVE = {
        "PUSH_URL": fake.push_url,
        "PUSH_TOKEN": TOKEN,
        "PUSH_TIMEOUT": 3.0,
        "PUSH_BATCH_SIZE": 50,
        "PUSH_CONCURRENCY": 10,
        "PUSH_BUDGET": 60.0,
        "PUSH_LEASE_TTL": 30.0,
        "PUSH_MAX_ATTEMPTS": 3,
        "PUSH_BACKOFF_BASE": 2.0,
        "PUSH_BACKOFF_MAX": 600.0,
    }
    return settings.WEAVE

from dataclasses import asdict

import pytest
from django.db import connection

from notifications.testing.fake_provider import FakePushProvider, FaultConfig
from onboarding.testing.fake_services import FakeSupplierServices
from tests.needs import require
from weave.leases import FakeClock


def pytest_collection_modifyitems(config, items):
    """Skip PostgreSQL-only tests on SQLite. `make test` runs the suite on both databases."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="PostgreSQL only; runs in the PostgreSQL pass of make test")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
    """`@pytest.mark.needs(why_not)`: skipped locally when a tool is missing, failed under CI=true."""
    for mark in item.iter_markers("needs"):
        require(mark.args[0] if mark.args else mark.kwargs.get("why_not"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake_services(settings):
    """The fake supplier services as a real HTTP server on a free port, wired into WEAVE settings."""
    with FakeSupplierServices() as fake:
        settings.WEAVE = {
            **getattr(settings, "WEAVE", {}),
            "SUPPLIER_API_URL": fake.url,
            "SUPPLIER_API_TIMEOUT": 5.0,
            # Retries stay real (they are not lease time) but short, so failure tests run fast.
            "ONBOARDING_RETRY_BACKOFF": 0.01,
            "ONBOARDING_RETRY_AFTER_MAX": 0.02,
        }
        yield fake


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

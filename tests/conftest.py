import pytest
from django.db import connection

from onboarding.fake_services import FakeSupplierServices
from weave.leases import FakeClock


def pytest_collection_modifyitems(config, items):
    """Skip PostgreSQL-only tests on SQLite. `make test` runs the suite on both databases."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="PostgreSQL only; runs in the PostgreSQL pass of make test")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


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

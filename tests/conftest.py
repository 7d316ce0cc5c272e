import pytest
from django.db import connection

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

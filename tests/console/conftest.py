from datetime import timedelta

import pytest

from notifications.models import DeliveryAttempt
from tests.factories import NotificationFactory
from weave.dashboard import clear_ttl_cache
from weave.telemetry import db_now


@pytest.fixture(autouse=True)
def _fresh_ttl_cache():
    clear_ttl_cache()
    yield
    clear_ttl_cache()


def add_attempts(count: int, *, outcome: str = "delivered", latency_ms: int = 150, ago: float = 120.0) -> list:
    """`count` attempts that finished `ago` seconds before the database's now."""
    finished = db_now() - timedelta(seconds=ago)
    row = NotificationFactory(status="delivered" if outcome == "delivered" else "pending")
    return DeliveryAttempt.objects.bulk_create(
        DeliveryAttempt(
            notification=row,
            owner="w",
            fence=1,
            started_at=finished - timedelta(milliseconds=latency_ms),
            finished_at=finished,
            latency_ms=latency_ms,
            outcome=outcome,
            reason="",
        )
        for _ in range(count)
    )

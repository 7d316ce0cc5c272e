"""The hot path stays lean: statements per delivered notification, amortised over a batch."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.delivery import deliver_batch
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db


def test_delivery__few_statements_per_delivered_notification(push_settings, fake, clock):
    NotificationFactory.create_batch(50, next_attempt_at=clock.current)
    with CaptureQueriesContext(connection) as queries:
        report = deliver_batch(clock=clock, concurrency=10)
    assert report.delivered == 50
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    # Per row: one guarded UPDATE, plus its share of the claim, the batch read and one INSERT per
    # group of answers finished together. No re-reads of the row.
    updates = sum(1 for s in statements if s.startswith("UPDATE"))
    assert updates == 51  # the claim + one guarded finish per row
    assert not [s for s in statements if s.startswith("SELECT") and "delivery_attempt" in s.lower()]
    assert len(statements) / 50 <= 2.2, len(statements)

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
    # The claim returns the rows it took (no SELECT after it); then per group of answers finished
    # together ONE guarded UPDATE for all its rows (PostgreSQL: FROM unnest(<one array per column>);
    # SQLite: WITH v AS (VALUES ...) UPDATE ... FROM v) and ONE multi-row INSERT for all its attempts.
    # Before this, a batch also read its rows back (one SELECT) and finished through an ORM CASE statement.
    finishes = [
        s
        for s in statements
        if s.startswith("WITH") or (s.startswith("UPDATE") and ("FROM unnest(" in s or "FROM (VALUES" in s))
    ]
    claims = [s for s in statements if s.startswith("UPDATE") and s not in finishes]
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert len(claims) == 1
    assert len(finishes) == len(inserts) <= 50
    assert not [s for s in statements if s.startswith("SELECT")]
    assert len(statements) == len(claims) + len(finishes) + len(inserts)
    # So at most 1/50 + 2 statements per notification, fewer as answers arrive together.
    assert len(statements) / 50 <= 2.02, len(statements)

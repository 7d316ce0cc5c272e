"""A claim compiled once (`claim_statement`): the same claim each run, one statement, the clock honoured."""

import re
import tempfile
from datetime import timedelta
from unittest import mock

import pytest
from django.db import DataError, connection, connections, transaction
from django.db.models.sql.compiler import SQLUpdateCompiler

from tests.factories import JobFactory
from tests.leasetest.models import Job
from weave.leases import default_clock

TTL = 30


def holders() -> dict:
    return {pk: (owner, fence) for pk, owner, fence in Job.objects.values_list("pk", "owner", "fence")}


@pytest.mark.django_db
def test_claim_statement__with_the_database_clock_each_run_claims_again_without_compiling():
    jobs = JobFactory.create_batch(3)
    statement = Job.objects.order_by("pk").claim_statement(owner="a", ttl=TTL, limit=2, fields=["state"])
    with mock.patch.object(
        SQLUpdateCompiler, "as_sql", autospec=True, side_effect=SQLUpdateCompiler.as_sql
    ) as compiled:
        first, rows = statement.run()
        second, more = statement.run()
        third, none = statement.run()
    assert compiled.call_count == 0
    assert sorted(first.fences) == [jobs[0].pk, jobs[1].pk] and list(second.fences) == [jobs[2].pk]
    assert (len(third), none) == (0, [])
    assert sorted(row["state"] for row in rows + more) == ["open"] * 3
    assert holders() == {job.pk: ("a", 1) for job in jobs}
    # The database clock set each expiry: about TTL seconds after now, from the server's clock.
    left = default_clock.seconds_until(first.expires_at)
    assert left is not None and TTL - 5 < left <= TTL


@pytest.mark.django_db
def test_claim_statement__with_a_fake_clock_each_run_reads_the_clock_again(clock):
    job = JobFactory()
    Job.objects.claim_statement(owner="a", ttl=TTL, limit=5, fields=[], clock=clock).run()
    statement = Job.objects.claim_statement(owner="b", ttl=TTL, limit=5, fields=[], clock=clock)
    batch, _ = statement.run()
    assert len(batch) == 0 and holders() == {job.pk: ("a", 1)}  # a's lease is live
    clock.advance(TTL)  # a's lease ends: the same statement must see the new "now"
    batch, _ = statement.run()
    assert batch.fences == {job.pk: 2} and holders() == {job.pk: ("b", 2)}
    assert Job.objects.get(pk=job.pk).lease_expires_at == clock.current + timedelta(seconds=TTL)


def _frontend_statements(run) -> tuple[object, list[str]]:
    """Run `run()` with libpq tracing this connection; return its result and the statements it sent."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        try:
            result = run()
        finally:
            pgconn.untrace()
        trace.seek(0)
        sent = [line for line in trace.read().splitlines() if re.search(r"\bF\s+\d+\s+(Query|Parse)\b", line)]
    return result, sent


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_claim_statement__outside_a_transaction_is_one_statement_that_commits_by_itself():
    jobs = JobFactory.create_batch(2)
    statement = Job.objects.order_by("pk").claim_statement(owner="a", ttl=TTL, limit=5, fields=[])
    (batch, _), sent = _frontend_statements(statement.run)
    assert len(sent) == 1 and "UPDATE" in sent[0] and "BEGIN" not in sent[0], sent
    assert sorted(batch.fences) == [job.pk for job in jobs]
    assert connection.connection.info.transaction_status == 0  # IDLE: nothing left open
    # Committed: another session sees the claim at once.
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {Job._meta.db_table} WHERE owner = 'a' AND fence = 1")
            assert cursor.fetchone()[0] == 2
    finally:
        other.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_claim_statement__inside_a_transaction_a_failed_claim_leaves_it_usable():
    job = JobFactory()
    # A real failure inside the statement: the value is too long for the column (PostgreSQL checks it).
    statement = Job.objects.claim_statement(owner="a", ttl=TTL, limit=5, fields=[], also={"state": "x" * 21})
    with transaction.atomic():
        kept = JobFactory()
        with pytest.raises(DataError):
            statement.run()
        # The savepoint took the failure: the caller's transaction goes on and commits.
        kept.phase = "still here"
        kept.save(update_fields=["phase"])
    assert Job.objects.get(pk=kept.pk).phase == "still here"
    assert holders()[job.pk] == (None, 0)  # the failed claim took nothing

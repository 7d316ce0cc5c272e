"""weave.leases.binding keeps one server-binding cursor per connection (and per hot text) between statements.

Reused, a cursor must behave as a new one would: a statement run while the kept cursor is still being
read gets a cursor of its own and leaves the first one's rows alone; a new connection never meets the
old connection's cursor; a failed statement leaves the kept cursor usable; and times are read in C only
while the session's time zone is the one the kept cursor was made for.
"""

import datetime

import pytest
from django.db import DatabaseError, connection, transaction

from weave.leases.binding import statement_cursor

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the kept cursors are psycopg's"),
]

ROWS = "SELECT g, g::text FROM generate_series(1, %s::int) AS g"
A_TIME = "2026-12-02 04:05:06.789123+00"


def _raw(**kwargs):
    """The psycopg cursor behind one statement cursor, after a trivial statement on it."""
    with statement_cursor(connection, server_bound=True, **kwargs) as cursor:
        cursor.execute("SELECT %s::int", [1])
        assert cursor.fetchone() == (1,)
        return cursor.cursor


def test_the_cursor_is_kept_between_statements_and_not_across_connections():
    first = _raw()
    assert _raw() is first and not first.closed
    connection.close()
    again = _raw()
    assert again is not first
    assert _raw() is again


def test_a_statement_run_while_the_kept_cursor_is_read_gets_its_own_and_leaves_the_rows_alone():
    kept = _raw()
    with statement_cursor(connection, server_bound=True) as outer:
        outer.execute(ROWS, [3])
        assert outer.fetchone() == (1, "1")
        with statement_cursor(connection, server_bound=True) as inner:
            assert inner.cursor is not outer.cursor
            inner.execute(ROWS, [2])
            assert inner.fetchall() == [(1, "1"), (2, "2")]
            nested = inner.cursor
        assert outer.fetchall() == [(2, "2"), (3, "3")]  # the outer statement's rows, untouched
        assert outer.cursor is kept
    assert nested.closed  # the one-off cursor is closed as any cursor was before
    assert _raw() is kept and not kept.closed  # and the kept one is free again


def test_a_cursor_kept_for_one_text_is_apart_from_the_general_one():
    general = _raw()
    sql = "SELECT %s::int"
    with statement_cursor(connection, server_bound=True, text=sql) as cursor:
        cursor.execute(sql, [5])
        assert cursor.fetchone() == (5,)
        for_text = cursor.cursor
    assert for_text is not general
    with statement_cursor(connection, server_bound=True, text=sql) as cursor:
        cursor.execute(sql, [6])
        assert cursor.fetchone() == (6,)
        assert cursor.cursor is for_text
    assert _raw() is general


def test_a_failed_statement_frees_the_kept_cursor_for_the_next():
    kept = _raw()
    with pytest.raises(DatabaseError), transaction.atomic():
        with statement_cursor(connection, server_bound=True) as cursor:
            cursor.execute("SELECT 1 / %s::int", [0])
    assert _raw() is kept


def _read_time():
    with statement_cursor(connection, server_bound=True) as cursor:
        cursor.execute("SELECT %s::timestamptz", [A_TIME])
        (value,) = cursor.fetchone()
        return cursor.cursor, value


def test_times_are_read_as_django_reads_them_after_the_session_changes_its_time_zone():
    utc_cursor, before = _read_time()
    assert before.tzinfo is datetime.UTC
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Europe/Paris'")  # the session's, past this transaction
    try:
        other, after = _read_time()
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::timestamptz", [A_TIME])
            (django_s,) = cursor.fetchone()
        assert other is not utc_cursor  # the cursor reading times in C as UTC is not used
        assert (after, after.tzinfo) == (django_s, django_s.tzinfo)  # what Django's own cursor reads here
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
    _, value = _read_time()
    assert (value, value.tzinfo) == (before, datetime.UTC)

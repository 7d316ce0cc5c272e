"""Write a group's receipts (attempt rows) in one statement, built without model instances.

`bulk_create` builds a model instance per row and compiles every value through the ORM; for a group
of receipts that is more work for the worker than the statement is for the database. The columns and their
conversions are still Django's (`get_db_prep_save`). A receipt's times come from the lease clock:
pass `clock.now()` (or `clock.now(offset)`) as a value, and the database's clock (or a FakeClock's
literal) fills it in when the statement runs.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, models, router

from weave.leases.binding import statement_cursor
from weave.leases.bulk import insert_sql
from weave.leases.returning import ReturnedColumns


def insert_receipts(model: type[models.Model], rows: Sequence[Mapping[str, Any]], *, using: str | None = None) -> int:
    """Insert `rows` into `model`'s table; every row names the same fields. Return how many were inserted.

    One statement (PostgreSQL: its text never changes with the row count); several only past the
    database's parameter limit. Values are constants or clock expressions, never column references.
    """
    if not rows:
        return 0
    names = list(rows[0])
    if any(list(row) != names for row in rows):
        raise ValueError("insert_receipts: every row must name the same fields, in the same order.")
    alias = using or router.db_for_write(model)
    connection = connections[alias]
    for statement in insert_sql(model, connection, alias, rows, names):
        # The arrays form is sent server-bound: its values are not quoted into SQL text (weave.leases.binding).
        with statement_cursor(connection, server_bound=statement.server_bound) as cursor:
            cursor.execute(statement.sql, statement.params)
    return len(rows)


def insert_receipts_returning(
    model: type[models.Model], rows: Sequence[Mapping[str, Any]], returning: Sequence[str], *, using: str | None = None
) -> list[dict[str, Any]]:
    """`insert_receipts`, returning the inserted rows' `returning` fields as stored (a clock time's value, say).

    The same statements, each with a `RETURNING` clause; the values are converted as a query's would be.
    """
    if not rows:
        return []
    names = list(rows[0])
    if any(list(row) != names for row in rows):
        raise ValueError("insert_receipts: every row must name the same fields, in the same order.")
    alias = using or router.db_for_write(model)
    connection = connections[alias]
    columns = ReturnedColumns(model, returning, connection)
    stored: list[dict[str, Any]] = []
    for statement in insert_sql(model, connection, alias, rows, names):
        with statement_cursor(connection, server_bound=statement.server_bound) as cursor:
            cursor.execute(statement.sql + columns.clause, statement.params)
            stored += columns.read(cursor.fetchall(), connection)
    return stored

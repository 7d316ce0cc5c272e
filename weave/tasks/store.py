"""Store an enqueued task: one INSERT whose text is made once per database, with no model instance.

The ORM's `create()` builds a model instance and compiles its INSERT anew on every call; for the
caller's hand-over that is more work than the statement is for the database. The columns and their
conversions stay Django's (`weave.leases.preparer`). On PostgreSQL the statement's values are sent
apart from its text, and it is a named prepared statement where the site allows those
(`weave.leases.statement_cursor`): parsed and planned once per connection.
"""

import functools
from collections.abc import Mapping
from typing import Any

from django.db import connections

from weave.leases import Preparer, preparer, statement_cursor
from weave.models import TaskRow

# Written by every enqueue; the model's defaults fill `DEFAULTED`, and the other columns start NULL.
GIVEN = (
    "result_id",
    "backend",
    "queue_name",
    "task_path",
    "priority",
    "takes_context",
    "args",
    "kwargs",
    "next_attempt_at",
    "options",
    "created_at",
)
DEFAULTED = ("fence", "state", "attempts", "epoch", "last_error")


@functools.cache
def _statement(alias: str, vendor: str) -> tuple[str, tuple[Preparer, ...], tuple[Any, ...]]:
    connection = connections[alias]
    meta = TaskRow._meta
    fields = [meta.get_field(name) for name in (*GIVEN, *DEFAULTED)]
    qn = connection.ops.quote_name
    columns = ", ".join(qn(str(field.column)) for field in fields)  # type: ignore[union-attr]
    sql = f"INSERT INTO {qn(meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    prepare = tuple(preparer(field, connection) for field in fields[: len(GIVEN)])
    defaults = tuple(
        field.get_db_prep_save(field.get_default(), connection)  # type: ignore[union-attr]
        for field in fields[len(GIVEN) :]
    )
    return sql, prepare, defaults


def insert_task(values: Mapping[str, Any], *, using: str) -> None:
    """Insert one task row with `values` (every name of `GIVEN`) on database `using`."""
    connection = connections[using]
    sql, prepare, defaults = _statement(using, connection.vendor)
    params = [convert(values[name]) for convert, name in zip(prepare, GIVEN, strict=True)]
    params.extend(defaults)
    postgres = connection.vendor == "postgresql"
    # Every value goes into its own column, so the server types it from there.
    with statement_cursor(connection, server_bound=postgres, prepared=postgres, text=sql) as cursor:
        cursor.execute(sql, params)

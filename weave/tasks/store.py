"""Store an enqueued task: one INSERT whose text is made once per database, with no model instance.

`created_at` is left to the column's default, the database's clock, and read back by the same
statement (`RETURNING`): the task's `enqueued_at` is known without a second query.

The ORM's `create()` builds a model instance and compiles its INSERT anew on every call; for the
caller's hand-over that is more work than the statement is for the database. The columns and their
conversions stay Django's (`weave.leases.preparer`). On PostgreSQL the statement's values are sent
apart from its text, and it is a named prepared statement where the site allows those
(`weave.leases.statement_cursor`): parsed and planned once per connection.
"""

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.utils.dateparse import parse_datetime

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
)
DEFAULTED = ("fence", "state", "attempts", "epoch", "last_error")


@functools.cache
def _statement(alias: str, vendor: str) -> tuple[str, tuple[Preparer, ...], tuple[Any, ...]]:
    connection = connections[alias]
    meta = TaskRow._meta
    fields = [meta.get_field(name) for name in (*GIVEN, *DEFAULTED)]
    qn = connection.ops.quote_name
    columns = ", ".join(qn(str(field.column)) for field in fields)  # type: ignore[union-attr]
    created = qn(str(meta.get_field("created_at").column))
    values = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {qn(meta.db_table)} ({columns}) VALUES ({values}) RETURNING {created}"
    prepare = tuple(preparer(field, connection) for field in fields[: len(GIVEN)])
    defaults = tuple(
        field.get_db_prep_save(field.get_default(), connection)  # type: ignore[union-attr]
        for field in fields[len(GIVEN) :]
    )
    return sql, prepare, defaults


def insert_task(values: Mapping[str, Any], *, using: str) -> datetime:
    """Insert one task row with `values` (every name of `GIVEN`) on database `using`; return its `created_at`."""
    connection = connections[using]
    sql, prepare, defaults = _statement(using, connection.vendor)
    params = [convert(values[name]) for convert, name in zip(prepare, GIVEN, strict=True)]
    params.extend(defaults)
    postgres = connection.vendor == "postgresql"
    # Every value goes into its own column, so the server types it from there.
    with statement_cursor(connection, server_bound=postgres, prepared=postgres, text=sql) as cursor:
        cursor.execute(sql, params)
        created = cursor.fetchone()[0]
    return _aware(created)


def _aware(value: Any) -> datetime:
    """The returned `created_at` as the ORM would give it: SQLite returns the stored text, in UTC."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if not isinstance(value, datetime):
        raise TypeError(f"the task's INSERT returned {value!r} for created_at")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

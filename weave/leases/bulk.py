"""SQL for the lease core's group statements: a claim that returns its rows, a finish of many rows at once.

Only `LeaseQuerySet` calls these builders (it stays the only writer of lease fields). They exist as
hand-written SQL because the ORM has no `UPDATE ... FROM (VALUES ...)`, and its `CASE`/`Q` form of the
same statement cost a worker more CPU to build and compile than the database spent running it.

    finish: one UPDATE for the whole group, each row under its own guard (owner, fence, live lease)
        PostgreSQL:  UPDATE t AS n SET ... FROM (VALUES (...), ...) AS v(...) WHERE <guard> RETURNING id
        SQLite:      WITH v(...) AS (VALUES (...), ...) UPDATE t AS n SET ... FROM v WHERE <guard> RETURNING id

The clock's "now" goes into the same SQL (the database clock, or a FakeClock's literal).
"""

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, cast

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Value
from django.db.models.sql import UpdateQuery
from django.db.models.sql.compiler import SQLCompiler

from weave.leases.clock import Clock, DbNow
from weave.leases.lease import Lease

Field: TypeAlias = "models.Field[Any, Any]"  # a string: Field is generic only in django-stubs


def _field(model: type[models.Model], name: str) -> Field:
    """The concrete field `name` (lease writes name concrete columns, never relations)."""
    meta = model._meta
    return cast(Field, meta.pk if name == "pk" else meta.get_field(name))


def _col(field: Field) -> str:
    assert field.column is not None, f"{field.name} is a concrete column"
    return field.column


def _cast(connection: BaseDatabaseWrapper, sql: str, field: Field) -> str:
    # PostgreSQL types a VALUES list from its contents; untyped parameters would be text. SQLite is
    # dynamically typed, and a CAST there would turn a datetime string into a number.
    if connection.vendor == "postgresql":
        return f"({sql})::{field.cast_db_type(connection)}"
    return sql


class _Compiler:
    """Compiles single values and expressions (a clock's now) outside any query, for the VALUES list."""

    def __init__(self, model: type[models.Model], connection: BaseDatabaseWrapper, using: str) -> None:
        self.connection = connection
        self.query = UpdateQuery(model)
        self.compiler: SQLCompiler = self.query.get_compiler(using)
        # A group's rows share expressions (one "now" for all, a clock offset per retry delay):
        # compiling each through the ORM cost more than the statement, so each is compiled once.
        self._compiled: dict[Any, tuple[str, list[Any]]] = {}
        self._placeholders: dict[str, str] = {}

    def value(self, value: Any, field: Field) -> tuple[str, list[Any]]:
        if hasattr(value, "resolve_expression"):
            key = ("now", value.offset_seconds, field.name) if type(value) is DbNow else (id(value), field.name)
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiled[key] = self._expression(value, field)
            return compiled
        placeholder = self._placeholders.get(field.name)
        if placeholder is None:
            placeholder = self._placeholders[field.name] = _cast(self.connection, "%s", field)
        return placeholder, [field.get_db_prep_save(value, self.connection)]

    def _expression(self, value: Any, field: Field) -> tuple[str, list[Any]]:
        expression = value.resolve_expression(self.query, allow_joins=False, for_save=True)
        if expression.contains_column_references:
            raise ValueError(f"{field.name}: a group finish takes values, not column references.")
        sql, params = self.compiler.compile(expression)
        return _cast(self.connection, sql, field), list(params)


def finish_sql(
    model: type[models.Model],
    connection: BaseDatabaseWrapper,
    using: str,
    rows: Sequence[tuple[Lease, Mapping[str, Any]]],
    clock: Clock,
    *,
    guarded: bool = True,
) -> tuple[str, list[Any]]:
    """Return one statement releasing every row of `rows` still held by its lease, writing its fields.

    Each row lands only under the guard of `LeaseQuerySet.release()`: `pk` and the row's own owner and
    fence, with a lease live by `clock`. A field missing from some rows keeps its value there.
    """
    if connection.vendor == "postgresql":
        arrays = _finish_sql_arrays(model, connection, using, rows, clock, guarded=guarded)
        if arrays is not None:
            return arrays
    meta = model._meta
    qn = connection.ops.quote_name
    compiler = _Compiler(model, connection, using)
    pk_field = _field(model, "pk")
    owner_field = _field(model, "owner")
    fence_field = _field(model, "fence")
    expires_column = _col(_field(model, "lease_expires_at"))
    names = sorted({name for _, fields in rows for name in fields})
    fields = [_field(model, name) for name in names]
    partial = {name for name in names if any(name not in values for _, values in rows)}
    flag = models.BooleanField()

    value_columns = ["_w_pk", "_w_owner", "_w_fence"]
    for field in fields:
        value_columns.append(f"_w_{_col(field)}")
        if field.name in partial:
            value_columns.append(f"_w_set_{_col(field)}")

    tuples: list[str] = []
    params: list[Any] = []
    for lease, values in rows:
        cells: list[str] = []
        for value, field in ((lease.pk, pk_field), (lease.owner, owner_field), (lease.fence, fence_field)):
            sql, cell_params = compiler.value(value, field)
            cells.append(sql)
            params.extend(cell_params)
        for field in fields:
            present = field.name in values
            if present:
                sql, cell_params = compiler.value(values[field.name], field)
            else:
                sql, cell_params = _cast(connection, "NULL", field), []
            cells.append(sql)
            params.extend(cell_params)
            if field.name in partial:
                cells.append(_cast(connection, "%s", flag))
                params.append(present)
        tuples.append(f"({', '.join(cells)})")

    assignments = [
        f"{qn(_col(owner_field))} = NULL",
        f"{qn(expires_column)} = NULL",
    ]
    for field in fields:
        column = qn(_col(field))
        new = f"v.{qn('_w_' + _col(field))}"
        if field.name in partial:
            new = f"CASE WHEN v.{qn('_w_set_' + _col(field))} THEN {new} ELSE n.{column} END"
        assignments.append(f"{column} = {new}")

    now_sql, compiled_params = compiler.compiler.compile(
        clock.now().resolve_expression(compiler.query, allow_joins=False, for_save=True)
    )
    now_params: list[Any] = list(compiled_params)
    guard = (
        f"n.{qn(_col(pk_field))} = v._w_pk AND n.{qn(_col(owner_field))} = v._w_owner "
        f"AND n.{qn(_col(fence_field))} = v._w_fence "
        f"AND n.{qn(expires_column)} > {now_sql}"
    )
    if not guarded:
        guard, now_params = f"n.{qn(_col(pk_field))} = v._w_pk", []
    table = qn(meta.db_table)
    columns = ", ".join(value_columns)
    values_sql = ", ".join(tuples)
    set_sql = ", ".join(assignments)
    returning = f"RETURNING {qn(_col(pk_field))}"
    if connection.vendor == "postgresql":
        sql = f"UPDATE {table} AS n SET {set_sql} FROM (VALUES {values_sql}) AS v({columns}) WHERE {guard} {returning}"
        return sql, [*params, *now_params]
    sql = (
        f"WITH v({columns}) AS (VALUES {values_sql}) UPDATE {table} AS n SET {set_sql} FROM v WHERE {guard} {returning}"
    )
    return sql, [*params, *now_params]


# Field types whose values go into a PostgreSQL array as they are.
_ARRAY_TYPES = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "DateTimeField",
        "FloatField",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallIntegerField",
        "TextField",
    }
)


def _finish_sql_arrays(
    model: type[models.Model],
    connection: BaseDatabaseWrapper,
    using: str,
    rows: Sequence[tuple[Lease, Mapping[str, Any]]],
    clock: Clock,
    *,
    guarded: bool,
) -> tuple[str, list[Any]] | None:
    """PostgreSQL: the same statement with the VALUES list sent as one array per column (`unnest`).

    The SQL text then depends only on which fields are written, not on how many rows: psycopg reuses
    its parsed form and the worker builds no per-row SQL. A clock "now + offset" travels as its offset
    (the database adds it to `clock_timestamp()` for the row); a FakeClock's now is a literal value.
    Return None when a value is neither a constant nor a clock's now: the VALUES form handles it.
    """
    qn = connection.ops.quote_name
    pk_field = _field(model, "pk")
    owner_field = _field(model, "owner")
    fence_field = _field(model, "fence")
    expires_column = _col(_field(model, "lease_expires_at"))
    names = sorted({name for _, fields in rows for name in fields})
    fields = [_field(model, name) for name in names]
    if any(field.get_internal_type() not in _ARRAY_TYPES for field in (pk_field, *fields)):
        return None
    partial = {name for name in names if any(name not in values for _, values in rows)}

    columns: list[tuple[str, str, list[Any]]] = [  # (column name in v, SQL array type, values)
        ("_w_pk", f"{pk_field.cast_db_type(connection)}[]", []),
        ("_w_owner", f"{owner_field.cast_db_type(connection)}[]", []),
        ("_w_fence", f"{fence_field.cast_db_type(connection)}[]", []),
    ]
    for lease, _ in rows:
        columns[0][2].append(lease.pk)
        columns[1][2].append(lease.owner)
        columns[2][2].append(lease.fence)
    assignments = [f"{qn(_col(owner_field))} = NULL", f"{qn(expires_column)} = NULL"]
    for field in fields:
        column = _col(field)
        given: list[Any] = []
        offsets: list[float | None] = []
        flags: list[bool] = []
        for _, values in rows:
            present = field.name in values
            flags.append(present)
            value = values.get(field.name)
            if isinstance(value, DbNow):
                given.append(None)
                offsets.append(value.offset_seconds)
                continue
            if isinstance(value, Value):
                value = value.value
            elif hasattr(value, "resolve_expression"):
                return None
            given.append(field.get_db_prep_save(value, connection) if present else None)
            offsets.append(None)
        new = f"v.{qn('_w_' + column)}"
        columns.append((f"_w_{column}", f"{field.cast_db_type(connection)}[]", given))
        if any(offset is not None for offset in offsets):
            columns.append((f"_w_off_{column}", "double precision[]", offsets))
            offset = f"v.{qn('_w_off_' + column)}"
            # The same expression as DbNow: the database's clock when the statement runs, plus the offset.
            new = f"CASE WHEN {offset} IS NULL THEN {new} ELSE clock_timestamp() + make_interval(secs => {offset}) END"
        if field.name in partial:
            columns.append((f"_w_set_{column}", "boolean[]", flags))
            new = f"CASE WHEN v.{qn('_w_set_' + column)} THEN {new} ELSE n.{qn(column)} END"
        assignments.append(f"{qn(column)} = {new}")

    query = UpdateQuery(model)
    now_sql, compiled_params = query.get_compiler(using).compile(
        clock.now().resolve_expression(query, allow_joins=False, for_save=True)
    )
    now_params: list[Any] = list(compiled_params)
    guard = (
        f"n.{qn(_col(pk_field))} = v._w_pk AND n.{qn(_col(owner_field))} = v._w_owner "
        f"AND n.{qn(_col(fence_field))} = v._w_fence AND n.{qn(expires_column)} > {now_sql}"
    )
    if not guarded:
        guard, now_params = f"n.{qn(_col(pk_field))} = v._w_pk", []
    arrays = ", ".join(f"%s::{kind}" for _, kind, _ in columns)
    names_sql = ", ".join(name for name, _, _ in columns)
    sql = (
        f"UPDATE {qn(model._meta.db_table)} AS n SET {', '.join(assignments)} "
        f"FROM unnest({arrays}) AS v({names_sql}) WHERE {guard} RETURNING {qn(_col(pk_field))}"
    )
    return sql, [*(values for _, _, values in columns), *now_params]

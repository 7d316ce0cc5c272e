"""SQL for the lease core's group statements: a finish of many rows at once, and a multi-row insert.

Both exist as hand-written SQL because the ORM has no `UPDATE ... FROM (VALUES ...)`, and its
`CASE`/`Q` form (or `bulk_create`) is more work for a worker to build and compile than the
statement is for the database.

A group finish is described once, by a `FinishPlan` (the rows, which fields each writes, the guard),
and rendered by one of two renderers:

    arrays (PostgreSQL):  UPDATE t AS n SET ... FROM unnest(%s::type[], ...) AS v(...) WHERE <guard> RETURNING id[, ...]
    values (both):        UPDATE t AS n SET ... FROM (VALUES (...), ...) AS v(...) WHERE <guard> RETURNING id[, ...]
                          (SQLite: WITH v(...) AS (VALUES ...) UPDATE t AS n SET ... FROM v ...)

The arrays form's SQL text depends only on which fields are written, never on how many rows: psycopg
reuses its parsed form and the worker builds no per-row SQL. The clock's "now" goes into the same SQL
(the database clock, or a FakeClock's literal). Its arrays are sent apart from the text, in binary
(`Statement.server_bound`, `weave.leases.binding`): quoting them into it costs the worker more.
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias, cast

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Value
from django.db.models.sql import UpdateQuery
from django.db.models.sql.compiler import SQLCompiler

from weave.leases.clock import Clock, DbNow, postgres_now_plus
from weave.leases.lease import Lease
from weave.leases.prepare import preparer

Field: TypeAlias = "models.Field[Any, Any]"  # a string: Field is generic only in django-stubs
Sql: TypeAlias = tuple[str, list[Any]]

_ABSENT = object()  # a row that does not write this field: it keeps its value


class Statement(NamedTuple):
    """One statement to run, and whether every one of its parameters is typed by the lease core.

    `server_bound`: the arrays form, each array cast to its column's type in the SQL and the clock's
    "now" one of the core's own (DbNow's seconds, a FakeClock's datetime), so sending the values apart
    from the text (`binding.statement_cursor`) stores exactly what client-side quoting would. The
    values form can carry a caller's expression, whose parameters PostgreSQL might type otherwise.
    """

    sql: str
    params: list[Any]
    server_bound: bool = False


def _field(model: type[models.Model], name: str) -> Field:
    """The concrete field `name` (group writes name concrete columns, never reverse relations)."""
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


# --- columns: one field's values for every row -------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of the rows sent with a group statement: its alias in `v`, its field, a value per row."""

    alias: str
    field: Field
    values: list[Any]  # a constant, a clock expression (DbNow / a FakeClock's Value) or _ABSENT

    @functools.cached_property
    def partial(self) -> bool:
        # Asked once per cell by the values renderer: computed once per column.
        return any(value is _ABSENT for value in self.values)


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
        "JSONField",  # each value a psycopg Jsonb, sent as an element of a jsonb[]
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallIntegerField",
        "TextField",
    }
)


def _array_ready(field: Field) -> bool:
    # A foreign key travels as its target's type.
    target: Field = cast(Any, field).target_field if field.is_relation else field
    return target.get_internal_type() in _ARRAY_TYPES


class _Arrays:
    """The arrays renderer's side of columns: one array per column (and one of offsets for clock values)."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection
        self.sources: list[tuple[str, str, list[Any]]] = []  # (alias, SQL array type, values)

    def add(self, column: Column) -> str | None:
        """Send `column`; return the SQL that reads a row's value from `v`, or None if a value cannot travel."""
        given: list[Any] = []
        offsets: list[float | None] = []
        prepare = preparer(column.field, self.connection)  # get_db_prep_save, cheaper (weave.leases.prepare)
        for value in column.values:
            if isinstance(value, DbNow):
                given.append(None)
                offsets.append(value.offset_seconds)
                continue
            if isinstance(value, Value):
                value = value.value
            elif hasattr(value, "resolve_expression"):
                return None
            offsets.append(None)
            given.append(None if value is _ABSENT else prepare(value))
        self.sources.append((column.alias, f"{column.field.cast_db_type(self.connection)}[]", given))
        new = f"v.{column.alias}"
        if any(offset is not None for offset in offsets):
            self.sources.append((f"{column.alias}__off", "double precision[]", offsets))
            # The same expression as DbNow: the database's clock when the statement runs, plus the offset.
            now = postgres_now_plus(f"v.{column.alias}__off")
            new = f"CASE WHEN v.{column.alias}__off IS NULL THEN {new} ELSE {now} END"
        if column.partial:
            self.sources.append((f"{column.alias}__set", "boolean[]", [v is not _ABSENT for v in column.values]))
        return new

    def from_sql(self) -> Sql:
        arrays = ", ".join(f"%s::{kind}" for _, kind, _ in self.sources)
        names = ", ".join(alias for alias, _, _ in self.sources)
        return f"unnest({arrays}) AS v({names})", [values for _, _, values in self.sources]


class _Cells:
    """The values renderer's side: every cell compiled to SQL, each shared expression compiled once."""

    def __init__(self, model: type[models.Model], connection: BaseDatabaseWrapper, using: str) -> None:
        self.connection = connection
        self.query = UpdateQuery(model)
        self.compiler: SQLCompiler = self.query.get_compiler(using)
        # A group's rows share expressions (one "now" for all, a clock offset per retry delay):
        # compiling each through the ORM would outweigh the statement, so each is compiled once.
        self._compiled: dict[Any, Sql] = {}
        self._placeholders: dict[str, str] = {}

    def cell(self, value: Any, field: Field) -> Sql:
        if value is _ABSENT:
            return _cast(self.connection, "NULL", field), []
        if hasattr(value, "resolve_expression"):
            key = ("now", value.offset_seconds, field.name) if type(value) is DbNow else (id(value), field.name)
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiled[key] = self.expression(value, field)
            return compiled
        placeholder = self._placeholders.get(field.name)
        if placeholder is None:
            placeholder = self._placeholders[field.name] = _cast(self.connection, "%s", field)
        return placeholder, [field.get_db_prep_save(value, self.connection)]

    def expression(self, value: Any, field: "Field | None" = None) -> Sql:
        expression = value.resolve_expression(self.query, allow_joins=False, for_save=True)
        if expression.contains_column_references:
            raise ValueError(f"{getattr(field, 'name', '?')}: a group write takes values, not column references.")
        sql, params = self.compiler.compile(expression)
        return (sql if field is None else _cast(self.connection, sql, field)), list(params)

    def values_sql(self, columns: Sequence[Column]) -> Sql:
        """`(cell, ...), (cell, ...)`: one tuple per row, with a `_set` flag after each partial column."""
        flag = models.BooleanField()
        tuples: list[str] = []
        params: list[Any] = []
        for row in range(len(columns[0].values)):
            cells: list[str] = []
            for column in columns:
                value = column.values[row]
                sql, cell_params = self.cell(value, column.field)
                cells.append(sql)
                params.extend(cell_params)
                if column.partial:
                    cells.append(_cast(self.connection, "%s", flag))
                    params.append(value is not _ABSENT)
            tuples.append(f"({', '.join(cells)})")
        return ", ".join(tuples), params


def _aliases(columns: Sequence[Column]) -> str:
    names = []
    for column in columns:
        names.append(column.alias)
        if column.partial:
            names.append(f"{column.alias}__set")
    return ", ".join(names)


# --- the finish plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FinishPlan:
    """One guarded finish of many rows: each row released under its own lease, writing its own fields.

    Built once from the rows; `render_arrays` and `render_values` turn it into SQL. The guard is the
    one of `LeaseQuerySet.release()`, row by row: pk, the row's own owner and fence, a live lease.
    """

    model: type[models.Model]
    keys: tuple[Column, Column, Column]  # pk, owner, fence: what the guard matches
    fields: tuple[Column, ...]  # the written fields, sorted by name
    expect: tuple[tuple[str, Any], ...] = ()  # (field name, constant) every row must also match
    returning: tuple[str, ...] = ()  # fields each landed row returns as stored, after its pk

    @classmethod
    def build(
        cls,
        model: type[models.Model],
        rows: Sequence[tuple[Lease, Mapping[str, Any]]],
        *,
        expect: Mapping[str, Any] | None = None,
        returning: Sequence[str] = (),
    ) -> "FinishPlan":
        leases = [lease for lease, _ in rows]
        keys = (
            Column("_w_pk", _field(model, "pk"), [lease.pk for lease in leases]),
            Column("_w_owner", _field(model, "owner"), [lease.owner for lease in leases]),
            Column("_w_fence", _field(model, "fence"), [lease.fence for lease in leases]),
        )
        names = sorted({name for _, values in rows for name in values})
        fields = tuple(
            Column(f"_w_{_col(_field(model, name))}", _field(model, name), [v.get(name, _ABSENT) for _, v in rows])
            for name in names
        )
        return cls(
            model=model,
            keys=keys,
            fields=fields,
            expect=tuple(sorted((expect or {}).items())),
            returning=tuple(returning),
        )

    def guard(self, qn: Callable[[str], str], now: Sql) -> Sql:
        """The WHERE clause: each row only under its own lease, live by the clock's `now`."""
        pk, owner, fence = (qn(_col(column.field)) for column in self.keys)
        expires = qn(_col(_field(self.model, "lease_expires_at")))
        now_sql, now_params = now
        sql = f"n.{pk} = v._w_pk AND n.{owner} = v._w_owner AND n.{fence} = v._w_fence AND n.{expires} > {now_sql}"
        return sql, now_params

    def expected(self, guard: Sql, connection: BaseDatabaseWrapper) -> Sql:
        """`guard` with the plan's `expect` conditions added (each field equal to its constant)."""
        sql, params = guard[0], list(guard[1])
        for name, value in self.expect:
            field = _field(self.model, name)
            sql += f" AND n.{connection.ops.quote_name(_col(field))} = %s"
            params.append(field.get_db_prep_value(value, connection))
        return sql, params

    def assignments(self, qn: Callable[[str], str], new_values: Sequence[str]) -> str:
        """The SET list: the lease given up, and each field set to its row's value (kept where absent)."""
        assignments = [
            f"{qn(_col(_field(self.model, 'owner')))} = NULL",
            f"{qn(_col(_field(self.model, 'lease_expires_at')))} = NULL",
        ]
        for column, new in zip(self.fields, new_values, strict=True):
            target = qn(_col(column.field))
            if column.partial:
                new = f"CASE WHEN v.{column.alias}__set THEN {new} ELSE n.{target} END"
            assignments.append(f"{target} = {new}")
        return ", ".join(assignments)

    def _statement(self, connection: BaseDatabaseWrapper, source: str, set_sql: str, guard: str) -> str:
        qn = connection.ops.quote_name
        table = qn(self.model._meta.db_table)
        returned = [self.keys[0].field, *(_field(self.model, name) for name in self.returning)]
        returning = "RETURNING " + ", ".join(qn(_col(field)) for field in returned)
        if source.startswith("WITH "):
            return f"{source} UPDATE {table} AS n SET {set_sql} FROM v WHERE {guard} {returning}"
        return f"UPDATE {table} AS n SET {set_sql} FROM {source} WHERE {guard} {returning}"


def render_arrays(plan: FinishPlan, connection: BaseDatabaseWrapper, using: str, clock: Clock) -> Sql | None:
    """PostgreSQL: the plan with one array per column; None when some value cannot travel in an array."""
    if not all(_array_ready(column.field) for column in (plan.keys[0], *plan.fields)):
        return None
    arrays = _Arrays(connection)
    for column in plan.keys:
        arrays.add(column)
    new_values = [arrays.add(column) for column in plan.fields]
    if any(new is None for new in new_values):
        return None
    qn = connection.ops.quote_name
    source, params = arrays.from_sql()
    now = _Cells(plan.model, connection, using).expression(clock.now())
    guard, guard_params = plan.expected(plan.guard(qn, now), connection)
    set_sql = plan.assignments(qn, cast(list[str], new_values))
    return plan._statement(connection, source, set_sql, guard), [*params, *guard_params]


def render_values(plan: FinishPlan, connection: BaseDatabaseWrapper, using: str, clock: Clock) -> Sql:
    """Both vendors: the plan with a VALUES list (SQLite names it in a WITH clause)."""
    cells = _Cells(plan.model, connection, using)
    columns = [*plan.keys, *plan.fields]
    values_sql, params = cells.values_sql(columns)
    if connection.vendor == "postgresql":
        source = f"(VALUES {values_sql}) AS v({_aliases(columns)})"
    else:
        source = f"WITH v({_aliases(columns)}) AS (VALUES {values_sql})"
    qn = connection.ops.quote_name
    guard, guard_params = plan.expected(plan.guard(qn, cells.expression(clock.now())), connection)
    set_sql = plan.assignments(qn, [f"v.{column.alias}" for column in plan.fields])
    return plan._statement(connection, source, set_sql, guard), [*params, *guard_params]


def finish_sql(
    model: type[models.Model],
    connection: BaseDatabaseWrapper,
    using: str,
    rows: Sequence[tuple[Lease, Mapping[str, Any]]],
    clock: Clock,
    *,
    expect: Mapping[str, Any] | None = None,
    returning: Sequence[str] = (),
) -> Statement:
    """Return one statement releasing every row of `rows` still held by its lease (and matching `expect`),
    writing its fields; it returns each landed row's pk, then its `returning` fields as stored."""
    plan = FinishPlan.build(model, rows, expect=expect, returning=returning)
    if connection.vendor == "postgresql":
        arrays = render_arrays(plan, connection, using, clock)
        if arrays is not None:
            return Statement(*arrays, server_bound=_core_clock(clock))
    return Statement(*render_values(plan, connection, using, clock))


def _core_clock(clock: Clock) -> bool:
    # The clocks whose "now" the core compiles itself: DbNow (a float of seconds) and a FakeClock's
    # Value (a datetime). Another clock's expression may carry parameters only its author can type.
    now = clock.now()
    return type(now) is DbNow or type(now) is Value


# --- a multi-row insert ---------------------------------------------------------------------------------


def insert_sql(
    model: type[models.Model],
    connection: BaseDatabaseWrapper,
    using: str,
    rows: Sequence[Mapping[str, Any]],
    names: Sequence[str],
) -> list[Statement]:
    """Return the statements inserting `rows` (each maps every one of `names` to a value or clock expression).

    PostgreSQL: one `INSERT ... SELECT FROM unnest(...)` whose text never changes with the row count.
    Otherwise `INSERT ... VALUES`, split only past the database's parameter limit.
    """
    columns = [
        Column(f"_w_{index}", _field(model, name), [row[name] for row in rows]) for index, name in enumerate(names)
    ]
    qn = connection.ops.quote_name
    head = f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(qn(_col(c.field)) for c in columns)})"
    if connection.vendor == "postgresql" and all(_array_ready(column.field) for column in columns):
        arrays = _Arrays(connection)
        selected = [arrays.add(column) for column in columns]
        if all(select is not None for select in selected):
            source, params = arrays.from_sql()
            return [
                Statement(
                    f"{head} SELECT {', '.join(cast(list[str], selected))} FROM {source}", params, server_bound=True
                )
            ]
    cells = _Cells(model, connection, using)
    limit = connection.features.max_query_params or 65535
    chunk = max(1, limit // (2 * len(columns)))  # a clock cell may carry a parameter or two
    statements = []
    for start in range(0, len(rows), chunk):
        part = [Column(c.alias, c.field, c.values[start : start + chunk]) for c in columns]
        values_sql, params = cells.values_sql(part)
        statements.append(Statement(f"{head} VALUES {values_sql}", params))
    return statements

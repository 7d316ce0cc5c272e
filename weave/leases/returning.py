"""An `UPDATE ... RETURNING` compiled by the ORM once, and run as often as it is needed.

Django's `update()` returns only a count; a claim must learn exactly which rows it took and at which
fence, and reading them back afterwards by owner name would trust the name. PostgreSQL and SQLite
(3.35+) both support `RETURNING`.

Compiled once and kept (`ClaimStatement`): a worker claims with the same owner, lease length, limit
and fields every time, and with the database clock its statement's text and parameters never change.
Compiling that queryset again for every claim would cost the worker's thread more than the database
spends running it, on the thread that starts every send.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from django.db import connections, models, transaction
from django.db.models.sql import UpdateQuery

from weave.leases.binding import load_utc_times_in_c
from weave.leases.lease import BatchLease

Converter = Callable[..., Any]


class ReturnedColumns:
    """The fields a `RETURNING` clause names, and how to read its rows back as a query would (the backend's
    and the fields' converters), worked out once for a statement that runs many times."""

    def __init__(self, model: type[models.Model], names: Sequence[str], connection: Any) -> None:
        meta = model._meta
        self.names = list(names)
        fields = [cast("models.Field[Any, Any]", meta.pk if name == "pk" else meta.get_field(name)) for name in names]
        qn = connection.ops.quote_name
        self.clause = " RETURNING " + ", ".join(qn(cast(str, field.column)) for field in fields)
        self._converters: list[tuple[Any, list[Converter]]] = []
        for field in fields:
            col = field.get_col(meta.db_table)
            self._converters.append((col, connection.ops.get_db_converters(col) + col.get_db_converters(connection)))

    def read(self, raw: Sequence[Sequence[Any]], connection: Any) -> list[dict[str, Any]]:
        """The returned rows, each a dict of `names` to values as stored (`connection`: this thread's)."""
        rows = []
        for values in raw:
            row = {}
            for name, value, (col, convert_all) in zip(self.names, values, self._converters, strict=True):
                for convert in convert_all:
                    value = convert(value, col, connection)
                row[name] = value
            rows.append(row)
        return rows


class ReturningUpdate:
    """One queryset's UPDATE of `values`, returning the columns of `names` converted as a query's would be."""

    def __init__(
        self, queryset: "models.QuerySet[Any, Any]", names: Sequence[str], values: Mapping[str, Any], *, using: str
    ) -> None:
        self.alias = using
        connection = connections[self.alias]
        query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
        query.add_update_values(dict(values))
        compiler = query.get_compiler(self.alias)
        # Django refuses to compile FOR UPDATE (a claim's subselect) outside a transaction. An atomic block
        # that runs no statement sends nothing on PostgreSQL; SQLite has no FOR UPDATE and needs none.
        if connection.features.has_select_for_update and connection.get_autocommit():
            with transaction.atomic(using=self.alias):
                sql, params = self._compile(compiler)
        else:
            sql, params = self._compile(compiler)
        self.columns = ReturnedColumns(queryset.model, names, connection)
        self.sql = sql + self.columns.clause
        self.params = tuple(params)

    @staticmethod
    def _compile(compiler: Any) -> tuple[str, Sequence[Any]]:
        compiler.pre_sql_setup()
        sql, params = compiler.as_sql()
        return sql, params

    def run(self) -> list[dict[str, Any]]:
        """Run the statement on the queryset's write database; return the rows it changed."""
        connection = connections[self.alias]
        with connection.cursor() as cursor:
            load_utc_times_in_c(connection, getattr(cursor, "cursor", None))  # a claim returns times: C reads them
            cursor.execute(self.sql, self.params)
            raw = cursor.fetchall()
        return self.columns.read(raw, connection)


class ClaimStatement:
    """A batch claim (`LeaseQuerySet.claim_statement`): each `run()` claims up to `limit` more rows.

    Compiled once when the clock is the database's (its "now" is SQL, the same text every time);
    with a clock that binds its "now" as a value (`FakeClock`), compiled again at every run. The
    queryset's filters and `also` are compiled with it: give them no value that must change between
    runs.
    """

    def __init__(
        self, build: Callable[[], ReturningUpdate], *, owner: str, fields: Sequence[str], constant: bool
    ) -> None:
        self._build = build
        self.owner = owner
        self.fields = list(fields)
        self._update = build() if constant else None

    def run(self) -> tuple[BatchLease, list[dict[str, Any]]]:
        """Claim: one statement; outside a transaction it commits by itself (PostgreSQL: one round trip)."""
        update = self._update or self._build()
        if connections[update.alias].in_atomic_block:
            # A savepoint inside the caller's transaction, so a failed claim leaves that transaction usable.
            with transaction.atomic(using=update.alias):
                claimed = update.run()
        else:
            claimed = update.run()
        batch = BatchLease(owner=self.owner)
        rows = []
        for row in claimed:
            batch.fences[row["pk"]] = row["fence"]
            expires_at = row["lease_expires_at"]
            batch.expires_at = expires_at if batch.expires_at is None else min(batch.expires_at, expires_at)
            rows.append({"pk": row["pk"], **{name: row[name] for name in self.fields}})
        return batch, rows

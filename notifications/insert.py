"""The INSERT of one new notification on PostgreSQL, its text made once per process.

Every push that goes through `notification_create` is one INSERT. Building and compiling it through the
ORM (an `InsertQuery`, its compiler, the placeholders of twenty columns) is more work in the caller's
process than the rest of the hand-over, and the text is the same every time for a given database alias and a given
shape of the clock expressions. So the text is made once, from the same backend operations the ORM's
compiler uses (`bulk_insert_sql`, `return_insert_columns`), and each value is adapted the way the
compiler adapts it: the field's `pre_save(add=True)` (the creation time), then `get_db_prep_save`
(JSON, UUID, enums), and the database-clock expression compiled to its own SQL. A test holds the text
and the stored row identical to the ORM's (tests/notifications/test_insert_text.py).

Outside a transaction the same statement can carry the drain request's slot claim
(`notifications.queue.drain_claim_sql`), so the row and its request commit together in one round trip
and one WAL flush. Anything this module does not know how to build (another database, a clock
expression other than the database's, a field with a placeholder of its own) returns None, and the
caller takes the ORM's path.
"""

import functools
import weakref
from dataclasses import dataclass
from typing import Any, cast

from django.db import connections
from django.db.models import Field

from notifications.models import Notification
from weave.leases import DbNow, Preparer, preparer, statement_cursor
from weave.workers import SlotClaimSQL

# The only columns a new row may set by an expression (the database's clock, or a test's fake one).
CLOCK_FIELDS = ("next_attempt_at", "expires_at", "created_at")


@dataclass(frozen=True)
class _Text:
    fields: tuple[Field, ...]  # type: ignore[type-arg]
    insert_sql: str  # INSERT ... VALUES (...) RETURNING pk, next_attempt_at, expires_at


@functools.cache
def fields() -> tuple[Field, ...]:  # type: ignore[type-arg]
    """The columns a new notification's INSERT writes (every concrete one but the key and generated ones);
    the model's fields are fixed once the apps are loaded, so the tuple is made once."""
    meta = Notification._meta
    return tuple(f for f in meta.concrete_fields if not f.primary_key and not f.generated)


@functools.cache
def returned_fields() -> tuple[Field, ...]:  # type: ignore[type-arg]
    """What the INSERT returns, so nothing is read back: the key and the database-clock times (`CLOCK_FIELDS`).
    Fixed once the apps are loaded, as `fields()`."""
    meta = Notification._meta
    return (meta.pk, *(cast(Field, meta.get_field(name)) for name in CLOCK_FIELDS))  # type: ignore[type-arg]


def compiled_by_orm(value: Any) -> bool:
    """Whether `value` is an expression only the ORM's compiler can turn into SQL (a test's fake clock, a
    `pre_save` receiver's expression): the caller then takes the ORM's path."""
    return hasattr(value, "as_sql") or hasattr(value, "resolve_expression")


def adapted(field: Field, prepare: Preparer, notification: Notification) -> tuple[bool, Any]:  # type: ignore[type-arg]
    """What the compiler sends for a plain value of `field`: `pre_save` (the creation time), then
    `get_db_prep_save`, done by `prepare` (its entry in `preparers()`, which does the same to common
    values for less). (True, value), or (False, None) when `pre_save` gave an expression."""
    value = field.pre_save(notification, add=True)
    if compiled_by_orm(value):
        return False, None
    return True, prepare(value)


# Per connection object (each thread has its own): made on the first push of each.
_PREPARERS: "weakref.WeakKeyDictionary[Any, tuple[Preparer, ...]]" = weakref.WeakKeyDictionary()


def preparers(connection: Any) -> tuple[Preparer, ...]:
    """Each of `fields()`'s `get_db_prep_save` on `connection` (`weave.leases.prepare`), in that order.

    Made once per connection and looked up once per push, not once per column."""
    made = _PREPARERS.get(connection)
    if made is None:
        made = _PREPARERS[connection] = tuple(preparer(field, connection) for field in fields())
    return made


def saved(notification: Notification, db: str, returned: Any) -> None:
    """Set what the INSERT returned (`returned_fields()` order) on `notification`, now stored on `db`."""
    notification.pk, notification.next_attempt_at, notification.expires_at = returned[0], returned[1], returned[2]
    notification.created_at = returned[3]
    notification._state.adding, notification._state.db = False, db


@functools.cache
def _text(db: str, clock_placeholders: tuple[str, ...]) -> _Text | None:
    """The INSERT for `db` with the clock columns' placeholders `clock_placeholders` (in `CLOCK_FIELDS`
    order); None when the ORM would build something else (then the caller uses the ORM)."""
    connection = connections[db]
    ops: Any = connection.ops  # PostgreSQL's operations (return_insert_columns is not on the base class)
    meta = Notification._meta
    columns = fields()
    returning: tuple[Any, ...] = returned_fields()
    if any(getattr(f, "get_placeholder", None) is not None for f in columns):
        return None
    # The ORM applies these to the values RETURNING gives; there are none on PostgreSQL for these columns.
    if any(ops.get_db_converters(f.get_col(meta.db_table)) or f.get_db_converters(connection) for f in returning):
        return None
    by_name = dict(zip(CLOCK_FIELDS, clock_placeholders, strict=True))
    placeholders = [by_name.get(f.name, "%s") for f in columns]
    qn = ops.quote_name
    returning_sql, returning_params = ops.return_insert_columns(returning)
    if returning_params:
        return None
    sql = " ".join(
        [
            f"{ops.insert_statement(on_conflict=None)} {qn(meta.db_table)}",
            "({})".format(", ".join(qn(str(f.column)) for f in columns)),
            ops.bulk_insert_sql(columns, [placeholders]),
            returning_sql,
        ]
    )
    return _Text(fields=columns, insert_sql=sql)


def insert_sql(notification: Notification, db: str) -> tuple[str, list[Any]] | None:
    """The INSERT of `notification` on `db` and its parameters, as the ORM's compiler would make them;
    None when only the ORM can (not PostgreSQL, or a clock other than the database's)."""
    connection = connections[db]
    if connection.vendor != "postgresql":
        return None
    clock_sql: list[str] = []
    clock_params: dict[str, tuple[Any, ...]] = {}
    for name in CLOCK_FIELDS:
        value = getattr(notification, name)
        if isinstance(value, DbNow):
            sql, params = value.as_postgresql(cast(Any, None), connection)  # uses neither compiler nor query
            clock_sql.append(sql)
            clock_params[name] = tuple(params)
        elif compiled_by_orm(value):
            return None
        else:
            clock_sql.append("%s")
    text = _text(db, tuple(clock_sql))
    if text is None:
        return None
    values: list[Any] = []
    for field, prepare in zip(text.fields, preparers(connection), strict=True):
        if field.name in clock_params:
            values += clock_params[field.name]
        else:
            plain, value = adapted(field, prepare, notification)
            if not plain:
                return None
            values.append(value)
    return text.insert_sql, values


def insert(notification: Notification, db: str, *, claim: SlotClaimSQL | None = None) -> tuple[bool, bool] | None:
    """Insert `notification` on `db` with the text made once (`insert_sql`), and set its key and clock times.

    With `claim`, the same statement claims a request slot (it must run in autocommit, where it commits
    by itself) and its (taken, already_taken) columns are returned; without, (False, False). None: nothing was
    run, the caller inserts through the ORM."""
    built = insert_sql(notification, db)
    if built is None:
        return None
    sql, params = built
    if claim is not None:
        sql = _claiming(sql, claim.with_sql, claim.select_sql)
        params = [*params, *claim.with_params, *claim.select_params]
    with statement_cursor(connections[db], server_bound=True, prepared=True, text=sql) as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    saved(notification, db, row)
    if claim is None:
        return False, False
    taken = len(returned_fields())  # the claim's columns follow the returned ones
    return bool(row[taken]), bool(row[taken + 1])


@functools.cache
def _claiming(insert_sql: str, with_sql: str, select_sql: str) -> str:
    """The INSERT with a drain claim in the same statement. Made once, the text is the same object on
    every call, which lets psycopg keep what it learned of the parameters' types on a kept cursor."""
    return f"WITH new AS ({insert_sql}), {with_sql} SELECT new.*, {select_sql} FROM new"

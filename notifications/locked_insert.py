"""The fan-out's INSERT on PostgreSQL: device locks, rows and (outside a transaction) drain request in one statement.

`notification_send_to_user(s)` reads the users' devices, plans one row per sendable device, and then must
insert only the rows whose device is still active and still its user's, holding those device rows while it
does: a concurrent hand-over or deactivation then either waits for them and ends the new rows, or commits
first and its device is left out. Outside a transaction that took BEGIN, a locking read, the INSERT and
COMMIT, then the drain request; inside the caller's transaction, the locking read and the INSERT. Here it is
one data-modifying `WITH` (outside a transaction it commits by itself):

- `locked` takes the planned devices `FOR NO KEY UPDATE`, in key order, re-checking that each is still
  active and still belongs to one of the users, as the other path's locking read does (a row
  another transaction changed is re-read once that one commits, and left out if it no longer matches);
  with a few rows, their devices are named as plain parameters, so that PostgreSQL keeps one plan of the
  prepared statement (`_locked_sql`);
- the INSERT takes its rows from arrays, one per column (`unnest`), or for a few rows from a `VALUES`
  list of plain parameters, joined to `locked` on the device, so a device that did not pass gets no row;
- outside a transaction, the drain request's slot claim (`weave.wake.slot_claim_sql`), made only if a row
  was inserted (inside one the request waits for the caller's commit).

The text is made once per process and database alias, and per number of rows up to `FEW_ROWS`: beyond
that the rows travel as arrays, so any number of devices is the same text. Values are adapted as
`notifications.insert` adapts them for the one-row INSERT (`pre_save(add=True)`, then `get_db_prep_save`);
a database-clock time is sent as its offset and computed by the server per row, as the ORM's statement
would. Anything else (a clock expression the ORM must compile, a value a `pre_save` made an expression)
returns None, and the caller takes the ORM's path.
"""

import functools
import re
from collections.abc import Iterable
from typing import Any

from django.db import connections

from notifications import insert
from notifications.models import Device, Notification
from weave.leases import DbNow, postgres_now_plus, statement_cursor
from weave.workers import SlotClaimSQL

# The condition the drain claim carries here (`queue.drain_claim_sql(only_if=...)`): every device may
# have been left out, and a slot taken for no rows would hold off the next sender's request.
INSERTED = "EXISTS (SELECT 1 FROM new)"


def cast_type(field: Any, connection: Any) -> str:
    """The type to cast a parameter of `field`'s column to on `connection`: its type without the length,
    since an explicit cast to varchar(n) would cut a long value where the column refuses it."""
    return re.sub(r"\(.*?\)", "", str(field.db_type(connection)))


def _array_type(field: Any, connection: Any) -> str:
    return cast_type(field, connection) + "[]"


# Up to this many rows go as one VALUES list of plain parameters instead of arrays: psycopg finds each
# list's element type and array dimensions in Python, more work than the statement itself for
# the common send (one user, a few devices), while a plain parameter is dumped in C.
FEW_ROWS = 8


@functools.cache
def _statement_sql(db: str, few: int | None, claim_with: str | None, claim_select: str | None) -> str:
    """The whole statement, with the drain claim's pieces or without. Made once per shape, its text is the
    same object on every call, which lets a kept cursor reuse what psycopg learned of its parameters."""
    rows = _rows_sql(db, few)
    if claim_with is None:
        return f"WITH {rows} SELECT new.* FROM new"
    return f"WITH {rows}, {claim_with} SELECT new.*, {claim_select} FROM new"


def _locked_sql(db: str, few: int | None) -> str:
    """`locked`'s condition on the users (an array) and the devices: an array, or with a few rows each
    row's device as a plain parameter.

    With the devices as plain parameters, PostgreSQL plans the prepared statement once per connection.
    For a parameter compared with `= ANY(...)` it estimates an array of several elements in the plan it
    would keep, finds the plan made for each run's own values cheaper, and so plans the statement
    again on every run; planning then outweighs running the statement for a send to one user."""
    connection = connections[db]
    qn = connection.ops.quote_name
    device = Device._meta
    device_id, device_user = qn(str(device.pk.column)), qn(str(device.get_field("user").column))
    if few is None:
        return f"{device_user} = ANY(%s) AND {device_id} = ANY(%s)"
    key_type = cast_type(device.pk, connection)
    return f"{device_user} = ANY(%s) AND {device_id} IN ({', '.join(f'%s::{key_type}' for _ in range(few))})"


@functools.cache
def _rows_sql(db: str, few: int | None) -> str:
    """The WITH list's `locked` and `new` elements for `db` (parameters: `_locked_sql`'s, then the values:
    `few` rows of plain parameters, one row after the other, or with None one array per column)."""
    connection = connections[db]
    qn = connection.ops.quote_name
    columns = insert.fields()
    device, notification = Device._meta, Notification._meta
    device_id = qn(str(device.pk.column))
    device_active = qn(str(device.get_field("active").column))
    arrays: list[str] = []
    names: list[str] = []
    selected: list[str] = []
    for index, field in enumerate(columns):
        name = f"c{index}"
        array = _array_type(field, connection)
        if field.name in insert.CLOCK_FIELDS:
            # Two arrays: a time given as a value, or the database clock's offset in seconds (NULL: no time).
            arrays += [f"%s::{array}", "%s::double precision[]"]
            names += [f"{name}_at", f"{name}_secs"]
            offset = postgres_now_plus(f"v.{name}_secs")
            selected.append(f"CASE WHEN v.{name}_secs IS NULL THEN v.{name}_at ELSE {offset} END")
        else:
            arrays.append(f"%s::{array}")
            names.append(name)
            selected.append(f"v.{name}")
    device_column = f"c{[f.name for f in columns].index('device')}"
    if few is None:
        source = f"unnest({', '.join(arrays)}) WITH ORDINALITY AS v({', '.join(names)}, ord)"
    else:
        # The same casts on each element, without the array's brackets.
        elements = [cast.removesuffix("[]") for cast in arrays]
        values = ", ".join(f"({', '.join(elements)}, {n})" for n in range(1, few + 1))
        source = f"(VALUES {values}) AS v({', '.join(names)}, ord)"
    returning = [*insert.returned_fields(), notification.get_field("device")]
    return (
        # In key order, so two sends to the same users take the locks alike and never deadlock; MATERIALIZED:
        # the locks are taken by this scan of its own, which the INSERT joins, never folded into that join.
        f"locked AS MATERIALIZED (SELECT {device_id} AS id FROM {qn(device.db_table)}"
        f" WHERE {device_active} AND {_locked_sql(db, few)}"
        f" ORDER BY {device_id} FOR NO KEY UPDATE),"
        f" new AS (INSERT INTO {qn(notification.db_table)} ({', '.join(qn(str(f.column)) for f in columns)})"
        f" SELECT {', '.join(selected)}"
        f" FROM {source}"
        f" JOIN locked ON locked.id = v.{device_column}"
        f" ORDER BY v.ord RETURNING {', '.join(qn(str(f.column)) for f in returning)})"
    )


def _columns(rows: list[Notification], db: str) -> list[list[Any]] | None:
    """One list per array of `_rows_sql`, in its order; None when a value needs the ORM's compiler."""
    connection = connections[db]
    columns = insert.fields()
    arrays: list[list[Any]] = []
    for field, prepare in zip(columns, insert.preparers(connection), strict=True):
        if field.name in insert.CLOCK_FIELDS:
            at: list[Any] = []
            secs: list[float | None] = []
            for row in rows:
                value = getattr(row, field.name)
                if isinstance(value, DbNow):
                    at.append(None)
                    secs.append(value.offset_seconds)
                    continue
                if insert.compiled_by_orm(value):
                    return None
                plain, value = insert.adapted(field, prepare, row)
                if not plain:
                    return None
                at.append(value)
                secs.append(None)
            arrays += [at, secs]
            continue
        values = []
        for row in rows:
            plain, value = insert.adapted(field, prepare, row)
            if not plain:
                return None
            values.append(value)
        arrays.append(values)
    return arrays


def insert_locked(
    rows: list[Notification], users: Iterable[Any], db: str, *, claim: SlotClaimSQL | None
) -> tuple[bool, bool] | None:
    """Insert those of `rows` whose device is still active and still belongs to one of `users` (keys), locking
    those devices while the statement runs (until the transaction ends), and with `claim` claim the drain
    request in the same statement (autocommit only; PostgreSQL).

    Sets the key and clock times of each row inserted (the others stay unsaved) and returns the claim's
    (taken, already_taken), both False when no row was inserted (made with `only_if=INSERTED`, the claim then
    touches no slot) or without `claim`. None: nothing was run, the caller takes the ORM's path."""
    if not rows or connections[db].vendor != "postgresql":
        return None
    arrays = _columns(rows, db)
    if arrays is None:
        return None
    keys: list[Any] = [list(users)]
    few = len(rows) if len(rows) <= FEW_ROWS else None
    if few is None:
        values = arrays
        keys.append(list({row.device_id for row in rows}))
    else:
        values = [column[i] for i in range(few) for column in arrays]
        keys += [row.device_id for row in rows]
    if claim is None:
        sql, claimed = _statement_sql(db, few, None, None), []
    else:
        sql = _statement_sql(db, few, claim.with_sql, claim.select_sql)
        claimed = [*claim.with_params, *claim.select_params]
    params = [*keys, *values, *claimed]
    with statement_cursor(connections[db], server_bound=True, prepared=True, text=sql) as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    by_device = {row.device_id: row for row in rows}
    device_at = len(insert.returned_fields())  # the device follows the returned ones, then the claim's columns
    for values in returned:
        insert.saved(by_device[values[device_at]], db, values)
    if not returned or claim is None:
        return False, False
    return bool(returned[0][device_at + 1]), bool(returned[0][device_at + 2])

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
import weakref
from collections.abc import Iterable
from typing import Any

from django.db import connections
from django.db.models import Field

from notifications import insert
from notifications.models import Device, Notification
from weave.leases import DbNow, Preparer, postgres_now_plus, statement_cursor
from weave.workers import SlotClaimSQL

# The condition the drain claim carries here (`queue.drain_claim_sql(only_if=...)`): every device may
# have been left out, and a slot taken for no rows would hold off the next sender's request.
INSERTED = "EXISTS (SELECT 1 FROM new)"


def cast_type(field: Any, connection: Any) -> str:
    """The type to cast a parameter of `field`'s column to on `connection`: its type without the length,
    since an explicit cast to varchar(n) would cut a long value where the column refuses it."""
    return re.sub(r"\(.*?\)", "", str(field.db_type(connection)))


def _value_columns(fields: Iterable[Any], connection: Any, source: str) -> tuple[list[str], list[str], list[str]]:
    """Per field of `fields`: its parameters' casts, its columns' names in the row source `source` (c0, c1,
    ...) and the value the INSERT selects from there. A clock column takes two: a time given as a value,
    or the database clock's offset in seconds (NULL: no time)."""
    casts: list[str] = []
    names: list[str] = []
    selected: list[str] = []
    for index, field in enumerate(fields):
        name, kind = f"{source}.c{index}", cast_type(field, connection)
        if field.name in insert.CLOCK_FIELDS:
            casts += [f"%s::{kind}", "%s::double precision"]
            names += [f"c{index}_at", f"c{index}_secs"]
            offset = postgres_now_plus(f"{name}_secs")
            selected.append(f"CASE WHEN {name}_secs IS NULL THEN {name}_at ELSE {offset} END")
        else:
            casts.append(f"%s::{kind}")
            names.append(f"c{index}")
            selected.append(name)
    return casts, names, selected


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
    elements, names, selected = _value_columns(columns, connection, "v")
    device_column = f"c{[f.name for f in columns].index('device')}"
    if few is None:
        arrays = [f"{cast}[]" for cast in elements]  # one array per column, each element cast alike
        source = f"unnest({', '.join(arrays)}) WITH ORDINALITY AS v({', '.join(names)}, ord)"
    else:
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


# Per connection object (each thread has its own), as `insert.preparers`: made on the first push of each.
_SENT_FIELDS: "weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], list[tuple[Field[Any, Any], Preparer]]]]" = (
    weakref.WeakKeyDictionary()
)


def _sent_fields(connection: Any, skip: tuple[str, ...]) -> "list[tuple[Field[Any, Any], Preparer]]":
    """`insert.fields()` but those named in `skip`, each with its `insert.preparers(connection)` entry.

    Which columns a statement sends and how each is adapted are fixed per connection, and the send of one
    message sends the same few of them on every call: they are picked out once, not on every send."""
    made = _SENT_FIELDS.get(connection)
    if made is None:
        made = _SENT_FIELDS[connection] = {}
    if skip not in made:
        pairs = zip(insert.fields(), insert.preparers(connection), strict=True)
        made[skip] = [(field, prepare) for field, prepare in pairs if field.name not in skip]
    return made[skip]


def _columns(rows: list[Notification], db: str, skip: tuple[str, ...] = ()) -> list[list[Any]] | None:
    """One list per array of `_rows_sql`, in its order (without the columns named in `skip`); None when a
    value needs the ORM's compiler."""
    arrays: list[list[Any]] = []
    for field, prepare in _sent_fields(connections[db], skip):
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


# --- one user's send in the caller's transaction: the device read folded into the statement -------------

# The columns a send takes from the device row rather than from its message (`read_and_insert`), and the
# one the statement makes per row: the idempotency key is each row's own, and the rows of one message are
# known only inside the statement (PostgreSQL's random UUID, as `uuid.uuid4`'s; returned, so set on the row).
FROM_DEVICE = ("device", "device_token", "backend", "idempotency_key")
MADE_PER_ROW = {"idempotency_key": "gen_random_uuid()"}


# The columns a message or its times set; every other column of a new row holds its field's default.
FROM_MESSAGE = frozenset(
    ("title", "body", "data", "options", "collapse_key", "priority", "expires_at", "next_attempt_at", "last_error",
     "created_at")
)  # fmt: skip


def _message_columns() -> list[Any]:
    return [f for f in insert.fields() if f.name not in FROM_DEVICE]


@functools.cache
def _defaults_sql(db: str) -> dict[str, str]:
    """{field name: SQL literal} of the columns every new row of a message holds the same value in: the
    field's default, not callable, adapted as `_columns` adapts it, and simple enough to write as a
    literal (NULL, a whole number, a boolean, plain text). Written into the text, they need no parameter
    and nothing to adapt per call; a column whose default is anything else stays a parameter."""
    connection = connections[db]
    literals: dict[str, str] = {}
    for field, prepare in zip(insert.fields(), insert.preparers(connection), strict=True):
        if field.name in FROM_DEVICE or field.name in FROM_MESSAGE or (field.has_default() and callable(field.default)):
            continue
        value = prepare(field.get_default())
        if isinstance(value, str):
            value = getattr(value, "value", value)  # a choices enum's member: its value
        kind = cast_type(field, connection)
        if value is None:
            literals[field.name] = f"NULL::{kind}"
        elif type(value) is bool:
            literals[field.name] = f"{'TRUE' if value else 'FALSE'}::{kind}"
        elif isinstance(value, int):  # psycopg's Int4 or Int8 wrapper of it, too
            literals[field.name] = f"{int(value)}::{kind}"
        elif type(value) is str and value.isascii() and value.isprintable():
            literals[field.name] = "'{}'::{}".format(value.replace("'", "''").replace("%", "%%"), kind)
    return literals


def _sent_columns(db: str) -> list[Any]:
    """The message's columns that go as parameters (`_message_columns` without `_defaults_sql`)."""
    fixed = _defaults_sql(db)
    return [f for f in _message_columns() if f.name not in fixed]


@functools.cache
def _read_insert_sql(db: str, aliases: int) -> str:
    """`read_and_insert`'s statement for `db` with `aliases` rows of messages. Parameters: the user, then
    per alias its name, whether its message is sendable and the message's columns that are not written
    into the text (`_sent_columns`; a clock column as a time and an offset, as in `_rows_sql`), then the
    user again."""
    connection = connections[db]
    qn = connection.ops.quote_name
    device = Device._meta
    device_columns = {f.name: qn(str(f.column)) for f in device.concrete_fields}
    column = {name: device_columns[name] for name in ("id", "backend", "token", "user", "active")}
    used, made = device_columns["last_used_at"], device_columns["created_at"]
    table, user_type = qn(device.db_table), cast_type(device.get_field("user"), connection)
    casts, names, selected = _value_columns(_sent_columns(db), connection, "m")
    elements, names = ["%s::text", "%s::boolean", *casts], ["alias", "ok", *names]
    by_name = dict(zip([f.name for f in _sent_columns(db)], selected, strict=True))
    by_name.update(device="m.id", device_token="m.token", backend="m.backend", **MADE_PER_ROW, **_defaults_sql(db))
    columns = insert.fields()
    row = f"({', '.join(elements)})"
    meta = Notification._meta
    returning = [*insert.returned_fields(), meta.get_field("device"), meta.get_field("idempotency_key")]
    return (
        # `seen`: the user's active devices as a plain read sees them (the statement's snapshot).
        f"WITH seen AS MATERIALIZED (SELECT {column['id']} AS id, {column['backend']} AS backend,"
        f" {column['token']} AS token, {used} AS last_used_at, {made} AS created_at, {column['user']} AS user_id"
        f" FROM {table} WHERE {column['active']} AND {column['user']} = %s::{user_type}),"
        f" m (alias, ok, {', '.join(names[2:])}) AS (VALUES {', '.join([row] * aliases)}),"
        # The devices that get a row, with the row's values: those on a backend with a message, unless one
        # of the user's devices is on a backend that refuses it (then none, and the caller raises). Locked
        # in key order and re-checked as `locked` above. The device cap is not applied here: a device
        # beyond it is rare (the registration refuses one), and the caller, which finds it, then takes the
        # two-statement path.
        f" locked AS MATERIALIZED (SELECT seen.id, seen.token, seen.backend, m.* FROM seen"
        f" JOIN m ON m.alias = seen.backend AND m.ok"
        f" JOIN {table} AS d ON d.{column['id']} = seen.id AND d.{column['active']}"
        f" AND d.{column['user']} = %s::{user_type}"
        f" WHERE NOT EXISTS (SELECT 1 FROM seen JOIN m ON m.alias = seen.backend WHERE NOT m.ok)"
        f" ORDER BY seen.id FOR NO KEY UPDATE OF d),"
        f" new AS (INSERT INTO {qn(Notification._meta.db_table)} ({', '.join(qn(str(f.column)) for f in columns)})"
        f" SELECT {', '.join(by_name[f.name] for f in columns)} FROM locked AS m"
        f" RETURNING {', '.join(qn(str(f.column)) for f in returning)})"
        f" SELECT seen.*, new.* FROM seen LEFT JOIN new ON new.{qn(str(meta.get_field('device').column))} = seen.id"
    )


def read_and_insert(
    user_id: Any, messages: list[tuple[str, Notification | None]], db: str
) -> list[tuple[Any, ...]] | None:
    """In one statement: read the active devices of user `user_id`, and insert a row for each of them
    whose backend has a message in `messages` ((alias, a row holding that message and its times, or None
    when the backend refuses the message): none at all when one of the user's devices is on a backend that
    refuses it), each device locked and re-checked as `insert_locked` does. The rows take the device's
    key, backend and token as stored.

    Returns one tuple per device read, in key order: its `services._DEVICE_COLUMNS`, then what the
    inserted row's INSERT returned (`insert.returned_fields()`), its device and idempotency key (Nones for
    no row). A device read that has no
    row although its backend has a message was deactivated or handed over meanwhile (the re-check).
    None: nothing was run (not PostgreSQL, or a value only the ORM can build)."""
    if connections[db].vendor != "postgresql":
        return None
    params: list[Any] = [user_id]
    for alias, template in messages:
        if template is None:
            params += [alias, False] + [None] * _message_width(db)
            continue
        arrays = _columns([template], db, skip=_not_sent(db))
        if arrays is None:
            return None
        params += [alias, True] + [values[0] for values in arrays]
    params.append(user_id)
    sql = _read_insert_sql(db, len(messages))
    with statement_cursor(connections[db], server_bound=True, prepared=True, text=sql) as cursor:
        cursor.execute(sql, params)
        return sorted((tuple(row) for row in cursor.fetchall()), key=lambda row: row[0])


@functools.cache
def _message_width(db: str) -> int:
    """How many parameters one message's columns take (a clock column takes two)."""
    return sum(2 if f.name in insert.CLOCK_FIELDS else 1 for f in _sent_columns(db))


@functools.cache
def _not_sent(db: str) -> tuple[str, ...]:
    return (*FROM_DEVICE, *_defaults_sql(db))

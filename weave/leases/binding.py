"""A cursor that sends a statement's parameters apart from its text (server-side binding), for hot statements.

Django's psycopg 3 backend binds on the client unless OPTIONS["server_side_binding"] is set: psycopg
turns every parameter into SQL literal text in Python before the statement goes out. For the lease
core's group statements, whose parameters are arrays of a whole group's values, that quoting is the
bulk of the completer's own work. Sent apart, and lists in PostgreSQL's
binary array format, each element is converted by psycopg's C dumpers and nothing is quoted.

Only statements whose every parameter the SQL casts to its type (or that the lease core built itself:
the arrays of `bulk`, the clock's "now") go this way: with client-side binding PostgreSQL sees
literals, with server-side binding typed or unknown parameters, and an expression of the caller's
could resolve differently. Everything else, and every other database, keeps `connection.cursor()`.

Named prepared statements:
- By default none is made (`prepare=False` on every execute): psycopg would prepare a statement after
  `prepare_threshold` runs if a site set one, and a pooler in transaction mode (pgbouncer before 1.21)
  hands the next transaction to a server that has never seen it. An unnamed statement lives for one
  round trip only, which any pooler passes.
- `prepared=True` asks for one, at once, for a statement whose text is made once per process and that
  runs on every call of a hot path (the hand-over's INSERT): PostgreSQL then parses and plans it once
  per connection instead of on every run (for a short statement, planning is a large part of its time).
  It is made only where the site allows prepared statements: Django switches them off on every connection, to
  keep poolers working, unless `OPTIONS` sets psycopg's `prepare_threshold` (to any number: Django's
  own client-side cursors never prepare, so that setting reaches only statements like these). Even
  then, not on a database whose settings say it is behind a transaction pooler
  (`DISABLE_SERVER_SIDE_CURSORS`, which Django documents for that case), and not while queries are
  logged. Elsewhere the statement goes unnamed, as above.

Kept cursors: the cursor is not made anew for each statement. Each connection keeps one per thread and
kind (and one per hot statement's text, `text=`), freed again when the caller closes it (`_taken`).

What stays as it was:
- The cursor is wrapped the way `connection.cursor()` wraps its own (`make_cursor`, or
  `make_debug_cursor` when queries are logged), so `execute_wrapper`s, query logging and counting
  (`CaptureQueriesContext`) see every statement. The logged text has `$1`-style placeholders: what
  was sent; the values are in the log record's `params`.
- Where something replaced `connection.cursor` on the connection itself (django-debug-toolbar does, to
  record each query), that is used instead: it records what it knows how to, and only the speed-up is
  lost, in development.
"""

import datetime
import functools
import threading
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.utils.asyncio import async_unsafe


@async_unsafe
def statement_cursor(
    connection: BaseDatabaseWrapper, *, server_bound: bool, prepared: bool = False, text: str | None = None
) -> CursorWrapper:
    """A Django cursor of `connection`; with `server_bound` on PostgreSQL, one that binds on the server.

    `server_bound` says the caller's SQL types every parameter itself (a cast, a value whose Python type
    names its SQL type, or a column it is assigned to); `prepared` (with `server_bound`) that the text is
    the same on every run, so it may be a named prepared statement where no pooler is in the way (see the
    module's docstring). `text`, the SQL the cursor will run when a hot path runs that very string object
    on every call, keeps a cursor for it alone (`_taken`). The caller closes the cursor (use it in a `with`).
    """
    if not server_bound or connection.vendor != "postgresql" or "cursor" in vars(connection):
        return connection.cursor()
    # While queries are logged (DEBUG, a test capturing them) nothing is prepared: psycopg keeps no text of
    # a run of a prepared statement, and the log would show none.
    factory = _cursor_class(prepared and not connection.queries_logged and may_prepare(connection))
    if factory is None:
        return connection.cursor()
    # What BaseDatabaseWrapper._cursor() does before it wraps its cursor.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = _taken(connection, factory, text)
    connection.validate_thread_sharing()
    if connection.queries_logged:
        return connection.make_debug_cursor(raw)
    return connection.make_cursor(raw)


def _taken(connection: BaseDatabaseWrapper, factory: Any, text: str | None) -> Any:
    """The psycopg connection's kept cursor of `factory` (and `text`) if it is free, else a new one, kept
    if none is.

    A new psycopg cursor copies the connection's adapters to register its own, and psycopg looks up a
    dumper for every parameter's type on each statement a cursor runs that is not the one it ran last
    (the same string object). Together with the cursor's own set-up, that is a large part of a short
    statement's work in the caller's process. A kept cursor pays
    the first once per connection, and one kept for a single text the second too. A statement run
    while the kept cursor is in use (one inside another's `with`) gets a cursor of its own, closed after
    it, as before. The kept cursors read times in C only while the session's time zone is the one they
    were made for (`load_utc_times_in_c`)."""
    raw_connection = connection.connection
    kept: dict[Any, Any] = raw_connection.__dict__.setdefault("_weave_statement_cursors", {})
    zone = raw_connection.info.parameter_status("TimeZone")
    # Per thread too: a site may share a connection between threads (Django's `inc_thread_sharing`), and
    # a cursor's results must never be another thread's.
    key = (factory, text, threading.get_ident())
    cursor: Any = kept.get(key)
    usable = cursor is not None and not cursor.closed and cursor.zone == zone
    if usable and not cursor.in_use:
        cursor.in_use = True
        return cursor
    fresh = factory(raw_connection)
    _load_times_in(connection, fresh)
    fresh.zone, fresh.in_use = zone, True
    if not usable:
        kept[key], fresh.kept = fresh, True
    return fresh


def may_prepare(connection: BaseDatabaseWrapper) -> bool:
    """Whether the site lets `connection` make named prepared statements: its `OPTIONS` set a
    `prepare_threshold` (Django's default, None, switches them off), and its settings do not declare a
    transaction pooler (`DISABLE_SERVER_SIDE_CURSORS`)."""
    settings = connection.settings_dict
    if settings.get("DISABLE_SERVER_SIDE_CURSORS", False):
        return False
    return settings.get("OPTIONS", {}).get("prepare_threshold") is not None


@functools.cache
def _cursor_class(prepare: bool) -> Any:
    """Django's server-binding psycopg cursor that prepares every statement at once (`prepare`) or never;
    None under psycopg 2.

    Imported here, not at the top: a site on SQLite need not have psycopg installed."""
    base = _postgresql_base()
    if not base.is_psycopg3:
        return None
    from psycopg.types.array import ListBinaryDumper

    server_binding: Any = base.ServerBindingCursor

    class StatementCursor(server_binding):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # Lists go as binary arrays (on this cursor only). psycopg's default for a list is the text
            # form, quoted element by element in Python: sent apart in text, the arrays would cost
            # nearly what quoting them into the SQL does. A list of only NULLs, or an empty one, still
            # goes as text of unknown type; the SQL's cast types it.
            self.adapters.register_dumper(list, ListBinaryDumper)

        kept = False  # the connection's kept cursor (`_taken`): closing it frees it for the next statement
        in_use = False
        zone: bytes | str | None = None

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            # At once or never, whatever prepare_threshold counts (see the module's docstring).
            return super().execute(query, params, **{**kwargs, "prepare": prepare})

        def close(self) -> None:
            self.in_use = False
            if not self.kept:
                super().close()

    return StatementCursor


def _load_times_in(connection: Any, cursor: Any) -> None:
    if load_utc_times_in_c(connection, cursor):
        return
    # The same check as the backend's create_cursor(): times come back in the connection's time zone.
    from psycopg.pq import Format

    base = _postgresql_base()
    loader = connection.connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
    if connection.timezone != loader.timezone:
        base.register_tzloader(connection.timezone, cursor)


def load_utc_times_in_c(connection: Any, cursor: Any) -> bool:
    """Read `cursor`'s timestamptz columns with psycopg's own loader where it gives what Django's does.

    Django's loader (psycopg_any.BaseTzLoader) subclasses psycopg's pure-Python one and replaces each
    value's tzinfo with the connection's time zone, in Python, where psycopg's C loader does the work
    in C, and a claim returns several times a row. Where the connection's time zone is
    UTC and so is the session's (`TimeZone`, what the server converts times into before sending them),
    psycopg's loader returns the same datetimes in `datetime.timezone.utc`, the very tzinfo Django
    sets (tests/leases/test_time_loader.py compares the two). Elsewhere nothing changes: False.
    `cursor` is a psycopg cursor (a Django cursor's `.cursor`); anything else is left alone.
    """
    if connection.vendor != "postgresql" or connection.timezone is not datetime.UTC:
        return False
    base = _postgresql_base()
    if not base.is_psycopg3 or not hasattr(cursor, "adapters"):
        return False
    if cursor.connection.info.parameter_status("TimeZone") != "UTC":
        return False
    import psycopg
    from psycopg.pq import Format

    psycopgs = psycopg.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)  # C with psycopg[binary] or [c]
    cursor.adapters.register_loader(base.TIMESTAMPTZ_OID, psycopgs)
    return True


def _postgresql_base() -> Any:
    # Any: django-stubs leave out the backend's psycopg 3 names (ServerBindingCursor, TIMESTAMPTZ_OID, ...).
    from django.db.backends.postgresql import base

    return base

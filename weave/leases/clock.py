"""Clocks for lease decisions.

The database decides whether a lease is live, in the same statement as the write, so a clock here
does not return "the time": it returns an SQL expression for "now (+ offset)" that goes into the
guarded statement. `DatabaseClock` emits the database's own clock; `FakeClock` emits a literal that
a test moves forward. The SQL around it is the same in both cases.

`monotonic()` and `wait()` only schedule work (when to renew next); they never decide validity.
"""

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import NotSupportedError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Expression, Func, Value
from django.db.models.sql.compiler import SQLCompiler
from django.utils.dateparse import parse_datetime

ZERO = timedelta(0)

# What a vendor-specific `as_<vendor>()` returns: the SQL text and its parameters.
SqlWithParams = tuple[str, tuple[Any, ...]]


def postgres_now_plus(seconds_sql: str) -> str:
    """PostgreSQL's "now + seconds" for lease decisions, `seconds_sql` being a placeholder or a column.

    clock_timestamp(), not now(): now() is frozen at transaction start, so a long transaction would
    judge leases by a stale time.
    """
    return f"(clock_timestamp() + make_interval(secs => {seconds_sql}))"


# SQLite's "now" in the text format Django stores datetimes in, so comparisons stay lexicographic-safe.
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def read_database_now(connection: BaseDatabaseWrapper) -> datetime:
    """Read the database server's clock once (aware, UTC)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT clock_timestamp()")
            value = cursor.fetchone()[0]
        else:
            cursor.execute(f"SELECT {SQLITE_NOW}")
            value = parse_datetime(cursor.fetchone()[0])
    if not isinstance(value, datetime):
        raise TypeError(f"the database clock answered {value!r}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class DbNow(Func):
    """The database server's clock plus an offset, evaluated when the statement runs."""

    output_field = DateTimeField()

    def __init__(self, offset: timedelta = ZERO) -> None:
        super().__init__()
        self.offset_seconds = offset.total_seconds()

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> SqlWithParams:
        raise NotSupportedError(f"Weave leases support PostgreSQL and SQLite, not {connection.vendor}.")

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> SqlWithParams:
        return postgres_now_plus("%s"), (self.offset_seconds,)

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> SqlWithParams:
        return SQLITE_NOW.replace("%", "%%").replace("'now'", "'now', %s"), (f"{self.offset_seconds:+.6f} seconds",)


class Clock:
    """What the lease core needs from time."""

    # Whether `now()` compiles to the same SQL and parameters every time (the database's clock), so
    # that a statement compiled once stays right; a clock that binds its "now" as a value does not.
    constant_sql = False

    def now(self, offset: timedelta = ZERO) -> Expression:
        """Return an SQL expression for the database's 'now + offset'."""
        raise NotImplementedError

    def read(self, using: str = "default") -> datetime:
        """Return this clock's 'now' as a value: for windows and ages shown to people, never for validity."""
        raise NotImplementedError

    def rough_now(self) -> datetime:
        """This clock's now without a query, for bounds a year wide (how far ahead a send may be
        scheduled): this host's clock, whose few minutes of skew such a bound cannot feel. Never for validity."""
        return datetime.now(UTC)

    def seconds_until(self, when: datetime | None, using: str = "default") -> float | None:
        """Seconds from this clock's now until `when` (negative: overdue); None for None."""
        return None if when is None else (when - self.read(using)).total_seconds()

    def monotonic(self) -> float:
        """Return seconds on a local clock that only moves forward (for scheduling, never validity)."""
        raise NotImplementedError

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until `event` is set or `seconds` pass on this clock; return whether it was set."""
        raise NotImplementedError


class DatabaseClock(Clock):
    """The production clock: the database server's clock in every lease statement."""

    constant_sql = True

    def now(self, offset: timedelta = ZERO) -> Expression:
        return DbNow(offset)

    def read(self, using: str = "default") -> datetime:
        return read_database_now(connections[using])

    def seconds_until(self, when: datetime | None, using: str = "default") -> float | None:
        if when is None:
            return None
        connection = connections[using]
        if connection.vendor != "postgresql":
            return (when - read_database_now(connection)).total_seconds()
        # One statement: the difference is taken by the server at the instant it reads its clock.
        with connection.cursor() as cursor:
            cursor.execute("SELECT EXTRACT(EPOCH FROM (%s - clock_timestamp()))", [when])
            return float(cursor.fetchone()[0])

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(seconds, 0.0))


class FakeClock(Clock):
    """A clock a test moves by hand. Its 'now' is a literal bound into the same guarded SQL."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
        self._now = self._start
        self._changed = threading.Condition()

    @property
    def current(self) -> datetime:
        return self._now

    def now(self, offset: timedelta = ZERO) -> Expression:
        return Value(self._now + offset, output_field=DateTimeField())

    def read(self, using: str = "default") -> datetime:
        return self._now

    def rough_now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._changed:
            self._now += timedelta(seconds=seconds)
            self._changed.notify_all()

    def monotonic(self) -> float:
        return (self._now - self._start).total_seconds()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        deadline = self.monotonic() + seconds
        with self._changed:
            while not event.is_set() and self.monotonic() < deadline:
                # The real-time timeout only re-checks `event`; fake time moves by advance().
                self._changed.wait(0.05)
        return event.is_set()


default_clock = DatabaseClock()

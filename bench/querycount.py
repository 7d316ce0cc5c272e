"""Count SQL statements, transactions and round trips, in every thread of this process.

`CaptureQueriesContext` sees one connection, the current thread's. A delivery path that finishes rows
from a thread pool or a heartbeat thread uses other connections, so this counter hooks the one method
every Django cursor goes through (`CursorWrapper._execute_with_wrappers`) and the connection's
commit/rollback, for the duration of a `with` block.

Round trips as psycopg 3 makes them: each statement is one; a transaction opened by `atomic()` adds
an implicit `BEGIN` before its first statement and a `COMMIT` (or `ROLLBACK`) at its end. A statement
run in autocommit mode is its own transaction and costs no more than itself.
"""

import threading
from collections import Counter
from dataclasses import dataclass, field

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


@dataclass
class Counts:
    statements: int = 0
    autocommit_statements: int = 0
    transactions_explicit: int = 0  # atomic() blocks that ran at least one statement
    by_kind: Counter = field(default_factory=Counter)

    @property
    def transactions(self) -> int:
        return self.autocommit_statements + self.transactions_explicit

    @property
    def round_trips(self) -> int:
        return self.statements + 2 * self.transactions_explicit


class CountQueries:
    """`with CountQueries() as counts:` — everything any thread ran meanwhile lands in `counts`."""

    def __init__(self) -> None:
        self.counts = Counts()
        self._lock = threading.Lock()
        self._dirty: set[int] = set()  # connections with statements since their last commit/rollback

    def __enter__(self) -> Counts:
        counter = self
        self._execute = original_execute = CursorWrapper._execute_with_wrappers
        self._commit = original_commit = BaseDatabaseWrapper.commit
        self._rollback = original_rollback = BaseDatabaseWrapper.rollback

        def execute(cursor, sql, params, many, executor):
            db = cursor.db
            autocommit = db.get_autocommit()
            with counter._lock:
                counter.counts.statements += 1
                counter.counts.by_kind[sql.lstrip().split(None, 1)[0].upper()] += 1
                if autocommit:
                    counter.counts.autocommit_statements += 1
                else:
                    counter._dirty.add(id(db))
            return original_execute(cursor, sql, params, many, executor)

        def ended(original):
            def end(db):
                with counter._lock:
                    if id(db) in counter._dirty:
                        counter._dirty.discard(id(db))
                        counter.counts.transactions_explicit += 1
                return original(db)

            return end

        CursorWrapper._execute_with_wrappers = execute
        BaseDatabaseWrapper.commit = ended(original_commit)
        BaseDatabaseWrapper.rollback = ended(original_rollback)
        return self.counts

    def __exit__(self, *exc: object) -> None:
        CursorWrapper._execute_with_wrappers = self._execute
        BaseDatabaseWrapper.commit = self._commit
        BaseDatabaseWrapper.rollback = self._rollback

"""A created job row wakes the due-time watchers once per transaction, after it commits.

The watchers sleep in LISTEN on PostgreSQL; a new row is new due work, so they are told at once rather
than at their next idle wake-up. A site that creates rows one by one inside one transaction pays one
NOTIFY for all of them, sent after the commit (when the rows are visible); a row saved in autocommit
wakes them at once, as before.
"""

from typing import Any
from weakref import WeakKeyDictionary

from django.db import connections, transaction

from weave.wake import tell_watchers

# Per connection: the list of commit hooks our wake-up was added to. Django replaces that list when the
# transaction ends or a savepoint rolls back, so the same list still being there means the wake-up is still
# pending in this transaction; anything else is looked up once.
_marked: "WeakKeyDictionary[Any, list[Any]]" = WeakKeyDictionary()


def _wake_after_commit() -> None:
    tell_watchers()


def _pending(conn: Any) -> bool:
    hooks = conn.run_on_commit
    if _marked.get(conn) is hooks:
        return True
    if any(func is _wake_after_commit for _, func, _ in hooks):
        _marked[conn] = hooks  # kept after a savepoint's rollback (it was added outside that savepoint)
        return True
    return False


def tell_watchers_of_new_row(using: str) -> None:
    """Wake the watchers for a row just created on `using`: once its transaction commits, once per transaction."""
    conn = connections[using]
    if conn.vendor != "postgresql":
        return  # nobody sleeps in LISTEN elsewhere: the watchers poll
    if not conn.in_atomic_block:
        tell_watchers()  # autocommit (or a transaction managed by hand, where NOTIFY waits for its commit)
        return
    if _pending(conn):
        return
    # robust: the rows are committed whatever happens here; a wake-up that fails only means the watchers
    # find them at their next idle wake-up.
    transaction.on_commit(_wake_after_commit, using=using, robust=True)
    _marked[conn] = conn.run_on_commit

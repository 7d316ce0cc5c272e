"""A COMMIT that lands and then fails as a dropped link does (its reply lost), on either database.

The real thing, a link dropped between the server's commit and its reply, is in
tests/partitions/test_lost_replies.py (PostgreSQL, through the silent proxy). Here the driver's own
error class is raised right after a real COMMIT, on the connection of whichever thread commits.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

LINK_DOWN = "server closed the connection unexpectedly"


@contextmanager
def commit_reply_lost(monkeypatch: Any, arm: Callable[..., Any], target: Any, name: str) -> Iterator[dict[str, Any]]:
    """Wrap `target.name` (a function the write runs inside its transaction) so that the COMMIT after its
    first call lands and then raises `OperationalError`; the dict yielded says whether it fired."""
    state = {"armed": False, "fired": False}
    real_call = getattr(target, name)
    real_commit = BaseDatabaseWrapper._commit

    def call(*args: Any, **kwargs: Any) -> Any:
        result = real_call(*args, **kwargs)
        if arm(*args, **kwargs):
            state["armed"] = True
        return result

    def commit(self: BaseDatabaseWrapper) -> Any:
        result = real_commit(self)
        if state["armed"] and not state["fired"]:
            state["fired"] = True
            raise OperationalError(LINK_DOWN)
        return result

    monkeypatch.setattr(target, name, call)
    monkeypatch.setattr(BaseDatabaseWrapper, "_commit", commit)
    yield state
    monkeypatch.undo()

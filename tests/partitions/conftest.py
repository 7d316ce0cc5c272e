"""Partition a worker from PostgreSQL with the silent TCP proxy (tools/partition.py).

`cut_off` routes the connections of chosen threads (the cut-off worker and its heartbeat threads)
through a `SilentProxy`, with the worker session limits applied as a worker process would get them
(weave.worker_db.worker_options), and can partition the link right after a chosen statement's reply
arrived: the statement landed on the server, the next one and the COMMIT do not.
"""

import re
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from django.db import connection, connections

from tools.partition import SilentProxy
from weave.worker_db import worker_options

# Short server-side limits and leases, so a partition resolves in a few seconds of real time.
LIMITS = {
    "WORKER_DB_STATEMENT_TIMEOUT": 1.0,
    "WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT": 1.0,
    "WORKER_DB_CONNECT_TIMEOUT": 2,
    "WORKER_DB_KEEPALIVES_IDLE": 1,
    "WORKER_DB_KEEPALIVES_INTERVAL": 1,
    "WORKER_DB_KEEPALIVES_COUNT": 1,
    "WORKER_DB_TCP_USER_TIMEOUT": 1.5,
}
TTL = 2.0  # the cut-off worker's lease
RECOVERY_SLACK = 5.0  # the bench's target: recovery within TTL + 5 s of when the lease could expire
RECOVERY_WAIT = 60.0  # how long a test waits for the recovery at most (a bound on the wait, not a target)


@dataclass
class CutOff:
    proxy: SilentProxy
    trigger: dict[str, Any] = field(default_factory=dict)
    partitioned_at: datetime | None = None  # database time, read by the test right after the cut
    fired: threading.Event = field(default_factory=threading.Event)

    def after(self, pattern: str, *, thread_prefix: str = "") -> None:
        """Partition right after the first statement matching `pattern` (on a thread named `thread_prefix`...)."""
        self.trigger = {"pattern": re.compile(pattern), "thread": thread_prefix}

    def lose_reply_at_commit(self, pattern: str, *, thread_prefix: str = "") -> None:
        """After the first statement matching `pattern`, the transaction's COMMIT reaches the server and its
        reply is lost (`SilentProxy.lose_replies`): everything up to the COMMIT's reply gets through."""
        self.trigger = {"pattern": re.compile(pattern), "thread": thread_prefix, "at_commit": True, "reply": False}

    def drop_after_commit(self, pattern: str, *, thread_prefix: str = "") -> None:
        """After the first statement matching `pattern`, the transaction's COMMIT lands and its reply comes
        back; the links drop right then, before the thread's next statement (its on-commit hooks')."""
        self.trigger = {"pattern": re.compile(pattern), "thread": thread_prefix, "at_commit": True, "reply": True}

    def drop_after_landed(self, landed: Callable[[], bool], seconds: float = 20.0) -> None:
        """Once `landed()` (read by the test, directly) shows the COMMIT landed, drop the worker's links."""
        import time

        self.wait_cut(seconds)
        deadline = time.monotonic() + seconds
        while not landed():
            assert time.monotonic() < deadline, "the COMMIT whose reply is lost never landed"
            time.sleep(0.02)
        self.proxy.cut_clients()

    def before_commit(self) -> None:
        trigger = self.trigger
        if trigger.get("armed") is threading.current_thread() and not self.fired.is_set() and not trigger["reply"]:
            # Right before the COMMIT goes out: it will reach the server, its reply will not come back.
            self.proxy.lose_replies(max_seconds=60)
            self.fired.set()

    def after_commit(self) -> None:
        trigger = self.trigger
        if trigger.get("armed") is threading.current_thread() and not self.fired.is_set() and trigger["reply"]:
            # The COMMIT landed and its reply arrived: the link drops before anything else goes out.
            self.proxy.cut_clients()
            self.fired.set()

    def wait_cut(self, seconds: float = 20.0) -> datetime:
        assert self.fired.wait(seconds), "the partition point was never reached"
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            self.partitioned_at = cursor.fetchone()[0]
        return self.partitioned_at

    def wrapper(self, execute: Callable, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        trigger = self.trigger
        if (
            trigger
            and not self.fired.is_set()
            and threading.current_thread().name.startswith(trigger["thread"])
            and trigger["pattern"].search(sql)
        ):
            if trigger.get("at_commit"):
                trigger.setdefault("armed", threading.current_thread())
                return result
            # The reply is in: this statement landed. Everything after it meets a silent link.
            self.proxy.partition(max_seconds=60)
            self.fired.set()
        return result


@pytest.fixture
def worker_limits(settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), **LIMITS}
    return settings.WEAVE


@pytest.fixture
def cut_off(worker_limits) -> Iterator[Callable[..., Any]]:
    """Return `route(*thread_name_prefixes) -> CutOff`; the routing and the proxy end with the test."""
    stack: list[tuple[SilentProxy, Callable[[str], Any]]] = []

    @contextmanager
    def _noop() -> Iterator[None]:
        yield

    def route(*prefixes: str) -> CutOff:
        params = connection.settings_dict
        proxy = SilentProxy((params["HOST"] or "127.0.0.1", int(params["PORT"] or 5432)))
        cut = CutOff(proxy)
        original = connections.create_connection

        def create(alias: str) -> Any:
            conn = original(alias)
            if alias == "default" and threading.current_thread().name.startswith(prefixes):
                routed = dict(conn.settings_dict)
                routed.update(HOST=proxy.host, PORT=str(proxy.port))
                routed["OPTIONS"] = worker_options(routed.get("OPTIONS") or {})
                conn.settings_dict = routed
                conn.execute_wrappers.append(cut.wrapper)
                conn._commit = _commit_through(cut, conn._commit)  # type: ignore[method-assign]
            return conn

        connections.create_connection = create  # type: ignore[method-assign]
        stack.append((proxy, original))
        return cut

    yield route
    for proxy, original in reversed(stack):
        connections.create_connection = original  # type: ignore[method-assign]
        proxy.close()


def _commit_through(cut: CutOff, commit: Callable[[], Any]) -> Callable[[], Any]:
    def _commit() -> Any:
        cut.before_commit()
        done = commit()
        cut.after_commit()
        return done

    return _commit


def run_in_thread(name: str, target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `target` on a named thread (its own connection, closed at the end); keep its result, or its error
    with the formatted traceback (so a failed assertion on `result` shows where the thread raised)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = target()
        except BaseException as exc:  # handed to the test thread
            result["error"] = exc
            result["traceback"] = traceback.format_exc()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, result


def poll(attempt: Callable[[], Any], *, refusals: tuple[type[BaseException], ...], seconds: float = 30.0) -> Any:
    """Call `attempt` every 0.05 s until it returns without one of `refusals` (bounded)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            return attempt()
        except refusals:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)

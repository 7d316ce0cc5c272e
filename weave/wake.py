"""Wake the workers when work becomes due: coalesced task requests and the due-time watcher.

A request takes its `WakeRequest` slot in one guarded UPDATE and only the winner enqueues, so the
broker is never read (ORM and Redis alike); the task frees the slot when it starts. A `Watcher` thread
per worker process sleeps until the earliest due time (database clock) and then asks for a task. On
PostgreSQL it LISTENs (WAKE_LISTEN_DB); where a probe NOTIFY does not arrive (a pooler) it polls every
POLL_MAX, as on SQLite. While work stays due it asks every round, so a lost task's request lapses and
is replaced.
"""

import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django_q.conf import Conf
from django_q.tasks import async_task

from weave.conf import weave_settings
from weave.leases import DbNow, default_clock
from weave.leases.clock import SQLITE_NOW, postgres_now_plus
from weave.reports import note_answer, note_failure
from weave.worker_db import is_cut_off

logger = logging.getLogger("weave.wake")

# Read at each use, so a test may patch them.
REQUEST_LAPSE = 3.0  # seconds a slot stays taken when its task never starts (a lost task)
GRACE = 0.2  # seconds work found due after a notification is left to the task that sent it
POLL_MAX = 1.0  # longest poll (SQLite, a pooler), and the longest backoff while work stays overdue
IDLE = 30.0  # longest LISTEN with nothing due
PROBE_TIMEOUT = 2.0  # how long a probe NOTIFY may take before the watcher polls instead
CHANNEL = "weave_wake"  # due times changed, or new work arrived
TASK_CHANNEL = "weave_tasks"  # a task was enqueued: the brokers' idle waits listen here
ARRIVAL = "arrived"  # new work for a queued or lingering task, not a change of due times
_arrival_callbacks: list[Callable[[], None]] = []
_arrival_lock = threading.Lock()


# --- coalesced task requests ---------------------------------------------------------------------------


def request_name(base: str) -> str:
    """The request row of `base` on this broker queue: clusters on other queues get their own."""
    return f"{base}@{Conf.CLUSTER_NAME}"


def request_task(name: str, func: str, *args: Any, group: str, task_name: str | None = None) -> bool:
    """Enqueue `func(*args)` unless a task under request `name` is already waiting; return whether it was.

    Never raises for the broker: the caller's work is committed, so a failed enqueue frees the slot
    and the watchers ask again."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            claim = slot_claim_sql(name)
            cursor.execute(
                f"WITH {claim.with_sql} SELECT {claim.select_sql}", [*claim.with_params, *claim.select_params]
            )
            taken = bool(cursor.fetchone()[0])
        else:
            cursor.execute(_upsert_text(connection.vendor, True, "TRUE"), _upsert_params(name, REQUEST_LAPSE))
            taken = cursor.rowcount == 1  # neither inserted nor updated: the slot was taken
    return finish_claimed_request(name, func, *args, taken=taken, group=group, task_name=task_name)


def finish_claimed_request(
    name: str, func: str, *args: Any, taken: bool, group: str, task_name: str | None = None
) -> bool:
    """`request_task`, for a caller whose own committed statement carried the slot claim (`slot_claim_sql`)."""
    if not taken:
        return False
    try:
        async_task(func, *args, group=group, **({} if task_name is None else {"task_name": task_name}))
    except Exception as error:
        # Nothing was queued: free the slot, or every request would be swallowed until it lapsed.
        message = "event=enqueue_failed name=%s error=%s: the work is stored; the watchers will ask again"
        logger.warning(message, name, type(error).__name__, exc_info=True)
        free_slot(name)
        taken = False
    try:
        tell_watchers(task=taken)
    except Exception:  # the database may be down too: the watchers' own timers still run
        logger.debug("could not notify the watchers", exc_info=True)
    return taken


@dataclass(frozen=True)
class SlotClaimSQL:
    """The slot claim as pieces of a PostgreSQL statement of the caller's own (an INSERT of the work), so
    work and request commit together in one trip: one WITH element, and two boolean columns (taken,
    already_taken). The statement must commit at once (autocommit)."""

    with_sql: str
    with_params: tuple[Any, ...]
    select_sql: str
    select_params: tuple[Any, ...]


def slot_claim_sql(name: str, *, only_if: str = "TRUE") -> SlotClaimSQL:
    """The pieces that claim the slot of `name`; `only_if`: a further condition (SQL, no parameters)."""
    with_sql, select_sql = _slot_claim_text(only_if)
    return SlotClaimSQL(with_sql, _upsert_params(name, REQUEST_LAPSE), select_sql, (CHANNEL, ARRIVAL))


@functools.cache  # the same text object each time: callers build their statements once per text
def _slot_claim_text(only_if: str) -> tuple[str, str]:
    # Not won while `only_if` holds: the slot was taken, so the waiting or lingering task hears ARRIVAL.
    return (
        f"won AS ({_upsert_text('postgresql', True, only_if)} RETURNING 1)",
        "EXISTS (SELECT 1 FROM won), (SELECT count(pg_notify(%s, %s))"
        f" WHERE NOT EXISTS (SELECT 1 FROM won) AND ({only_if})) > 0",
    )


@functools.cache
def _upsert_text(vendor: str, claim: bool, only_if: str) -> str:
    """One INSERT that takes the slot of a request (its row made if missing, so two first requests do not
    race); `claim`: only a free slot, counting a request. Parameters: `_upsert_params`."""
    from weave.models import WakeRequest

    table = connection.ops.quote_name(WakeRequest._meta.db_table)
    until, now = (
        (postgres_now_plus("%s"), "clock_timestamp()")
        if vendor == "postgresql"
        else (SQLITE_NOW.replace("%", "%%").replace("'now'", "'now', %s"), SQLITE_NOW.replace("%", "%%"))
    )
    sql = (
        f"INSERT INTO {table} (name, queued_until, requests) SELECT %s, {until}, {int(claim)} WHERE {only_if}"
        " ON CONFLICT (name) DO UPDATE SET queued_until = excluded.queued_until"
    )
    if claim:
        sql += f", requests = {table}.requests + 1 WHERE {table}.queued_until IS NULL OR {table}.queued_until <= {now}"
    return sql


def _upsert_params(name: str, seconds: float) -> tuple[Any, ...]:
    return (name, seconds if connection.vendor == "postgresql" else f"{seconds:+.6f} seconds")


def on_arrival(callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` (on the watcher's thread; it must not block) each time this process's watcher hears
    of new work; return the function that stops it. A callback, not a flag: no arrival is lost."""
    with _arrival_lock:
        _arrival_callbacks.append(callback)

    def stop() -> None:
        with _arrival_lock:
            if callback in _arrival_callbacks:
                _arrival_callbacks.remove(callback)

    return stop


def _arrived() -> None:
    with _arrival_lock:
        callbacks = list(_arrival_callbacks)
    for callback in callbacks:
        try:
            callback()
        except Exception:  # a subscriber's bug must not stop the watcher hearing due times
            logger.exception("event=arrival_callback_failed")


def free_slot(name: str, *, won: int | None = None) -> None:
    """Free the slot of `name`: no task of it waits, or its running task takes no more work. With `won`, only
    while the slot's win count is still that: a request that won since keeps the slot for its own task."""
    from weave.models import WakeRequest

    taken = WakeRequest.objects.filter(name=name, queued_until__isnull=False)
    if won is not None:
        taken = taken.filter(requests=won)
    taken.update(queued_until=None)


def request_started(name: str, *, forget: bool = False) -> None:
    """The task of request `name` is running: free its slot (`forget`: delete a per-job row) and tell the watchers."""
    from weave.models import WakeRequest

    if forget:
        WakeRequest.objects.filter(name=name).delete()
    else:
        free_slot(name)
    tell_watchers()


def tell_watchers(*, task: bool = False) -> None:
    """Tell the watchers that due times changed (PostgreSQL; at commit); `task`: the brokers' idle waits too."""
    if connection.vendor == "postgresql":
        channels = [CHANNEL, TASK_CHANNEL] if task else [CHANNEL]
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(["pg_notify(%s, '')"] * len(channels)), channels)


class LingeringTask:
    """The wake-up side of a task that lingers for new work (a job type's `pipeline`): while it can take more
    it keeps its slot taken, so new requests reach it as arrivals instead of new tasks."""

    def __init__(self, name: str, watch: str, seconds: float) -> None:
        self.name, self.watch, self.seconds = name, watch, seconds
        self.poll = max(0.02, GRACE / 2)  # how often the loop looks for rows: a safety net for arrivals
        self._renewed = time.monotonic()
        self._won = 0  # the slot's winning requests when this task began: any later one has a task to come

    def begin(self, *, backlog: bool) -> None:
        """The task starts: keep the slot taken (or, with a backlog, free it for a helper)."""
        from weave.models import WakeRequest

        # Read first: this task's own hold never counts as a request, and a row made by the hold counts 0.
        self._won = WakeRequest.objects.filter(name=self.name).values_list("requests", flat=True).first() or 0
        if backlog or not self.seconds:
            free_slot(self.name)
        else:
            self._keep_slot_taken()
        tell_watchers()  # rows are about to be leased: the watchers learn when those leases would lapse

    def end(self) -> None:
        """The task takes no more work: free its slot, unless a request won the slot since `begin` (a helper,
        or a request after a lapse), whose task has yet to start and frees it then."""
        free_slot(self.name, won=self._won)

    def hears(self) -> bool:
        """Whether every new request reaches this process as an arrival (its watcher listens)."""
        return bool(weave_settings.WAKE_WATCHER) and _state.mode == "listen"

    def on_arrival(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` (on the watcher's thread; it must not block) each time this process's watcher hears
        of new work; return the function that stops it. A callback, not a flag: no arrival is lost."""
        return on_arrival(callback)

    def turn(self, has_space: bool) -> None:
        """Renew the slot every half linger while the loop can take new rows; a full loop lets it lapse."""
        if has_space and self.seconds and time.monotonic() - self._renewed >= self.seconds / 2:
            self._keep_slot_taken()
            self._renewed = time.monotonic()

    def backlog(self) -> None:
        pause_watch(self.watch, POLL_MAX)

    def _keep_slot_taken(self) -> None:
        # Unconditional, and never counted as a request: if the task dies, the slot lapses.
        with connection.cursor() as cursor:
            params = _upsert_params(self.name, self.seconds + GRACE)
            cursor.execute(_upsert_text(connection.vendor, False, "TRUE"), params)


# --- what is watched -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchSpec:
    """A kind of work the watcher watches: `next_due()` is the earliest database time a job of it becomes
    claimable (or None); `wake()` asks for a task, coalesced."""

    name: str
    next_due: Callable[[], datetime | None]
    wake: Callable[[], object]


_watches: dict[str, WatchSpec] = {}
_paused: dict[str, float] = {}  # kind -> time.monotonic() until which a task here claims it itself


def register_watch(spec: WatchSpec) -> None:
    _watches[spec.name] = spec


def registered_watches() -> list[WatchSpec]:
    return [_watches[name] for name in sorted(_watches)]


def pause_watch(name: str, seconds: float) -> None:
    """A task here claims every due row of kind `name` for `seconds` (a backlog): this process's watcher
    skips it meanwhile; other processes' watchers go on looking."""
    _paused[name] = time.monotonic() + seconds


# --- where the watcher hears notifications ------------------------------------------------------------


@dataclass
class ListenState:
    """Whether this process's watcher hears NOTIFY, as its last probe found (checks, dashboard)."""

    mode: str = "unknown"  # "listen", or "poll": notifications do not arrive
    reason: str = ""
    since: float = 0.0  # time.time() of the probe


_state = ListenState()
_poll_warned = False


def listen_state() -> ListenState:
    return _state


def listen_target() -> tuple[str, str]:
    """("dsn", text) or ("alias", name) of the session connection the watchers LISTEN on (WAKE_LISTEN_DB)."""
    target = str(weave_settings.WAKE_LISTEN_DB or "").strip()
    return ("dsn", target) if "=" in target or "://" in target else ("alias", target or "default")


def open_listener(channel: str = CHANNEL) -> Any:
    """A new autocommit psycopg connection LISTENing on `channel`, used for nothing else (so no query
    swallows a notification)."""
    import psycopg
    from django.db import connections

    kind, target = listen_target()
    params = {"conninfo": target} if kind == "dsn" else connections[target].get_connection_params()
    raw = psycopg.connect(**params, autocommit=True)
    raw.execute(f"LISTEN {channel}")
    return raw


def probe_listener(raw: Any, *, timeout: float | None = None, channel: str = CHANNEL) -> bool:
    """NOTIFY through the site's connection; whether `raw` hears it within `timeout` (never behind a pooler)."""
    token = f"probe:{uuid.uuid4().hex}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, token])
    deadline = time.monotonic() + float(PROBE_TIMEOUT if timeout is None else timeout)
    while (left := deadline - time.monotonic()) > 0:
        heard = [notify.payload for notify in raw.notifies(timeout=left, stop_after=1)]
        if ARRIVAL in heard:
            _arrived()
        if token in heard:
            return True
    return False


def _record(mode: str, reason: str) -> None:
    """Keep this process's probe result for the dashboard and the metrics; warn once when polling."""
    global _poll_warned
    from weave.models import WatcherProbe

    _state.mode, _state.reason, _state.since = mode, reason, time.time()
    try:
        WatcherProbe.objects.update_or_create(
            process=f"{socket.gethostname()}:{os.getpid()}"[:200],
            defaults={"mode": mode, "reason": reason, "probed_at": DbNow()},
        )
    except Exception:  # a missing table (not migrated yet) must not stop the watcher
        logger.debug("could not store the watcher's probe", exc_info=True)
    if mode == "poll" and not _poll_warned:
        _poll_warned = True
        logger.warning(
            "event=wake_polling reason=%s: the watchers poll due times every %g s instead of listening. "
            "Behind a transaction pooler, set WEAVE['WAKE_LISTEN_DB'] to a direct connection.",
            reason,
            POLL_MAX,
        )


class Listener:
    """A LISTEN on `channel` (PostgreSQL), opened and probed once per (re)open. Where the probe is not heard
    (a pooler) it stays closed, `polling`, until `reset()`: its owner sleeps instead of waiting on it."""

    def __init__(self, channel: str) -> None:
        self.channel, self.polling = channel, False
        self.raw: Any = None

    def connect(self) -> bool:
        """Open and probe the LISTEN unless it is open or polling; return whether it was (re)opened now."""
        if self.raw is not None or self.polling or connection.vendor != "postgresql":
            return False
        self.raw = open_listener(self.channel)
        try:
            self.polling = not probe_listener(self.raw, channel=self.channel)
        except Exception:
            self.close()
            raise
        if self.polling:  # a connection that hears nothing is of no use
            self.close()
        return True

    def read(self, seconds: float) -> list[str]:
        """The payloads of one read of up to `seconds`, taken whole: leaving the generator early would drop
        the rest, an arrival among them."""
        return [notify.payload for notify in self.raw.notifies(timeout=seconds, stop_after=1)]

    def close(self) -> None:
        raw, self.raw = self.raw, None
        close_quietly(raw)

    def reset(self) -> None:
        self.close()
        self.polling = False

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, cut short by any notification; True if one (or the (re)opening of the
        LISTEN, since one sent before it was not heard) cut it short. Where the probe is not heard (a pooler),
        on SQLite, or after a failure, it only sleeps. A broker's idle wait on TASK_CHANNEL."""
        deadline = time.monotonic() + seconds
        try:
            if self.connect():
                if self.polling:
                    logger.warning("event=notifications_unheard channel=%s: polling instead (a pooler?)", self.channel)
                return True
            if self.raw is not None:
                return bool(self.read(seconds))
        except Exception:  # its owner's own queries report an outage; here, sleep and reopen
            logger.debug("the LISTEN on %s failed; sleeping instead", self.channel, exc_info=True)
            self.close()
        time.sleep(max(0.0, deadline - time.monotonic()))
        return False


# --- the watcher thread --------------------------------------------------------------------------------


class Watcher:
    """Sleep until the earliest due time of the watched kinds, then ask for a task (`run()` until `stop()`).

    A due time reached by the timer is acted on at once; work found due right after a notification gets
    GRACE first, since the task that sent the notification is usually claiming it."""

    def __init__(self, specs: list[WatchSpec] | None = None) -> None:
        self.specs = specs
        self._stop = threading.Event()
        self.listener = Listener(CHANNEL)  # open: the last probe arrived, so long sleeps are safe
        self._overdue_seen: set[str] = set()
        self._looked: dict[str, tuple[float, float]] = {}  # kind -> (monotonic time of its last look, its sleep)
        self._poll = GRACE

    def stop(self) -> None:
        self._stop.set()

    def longest_sleep(self) -> float:
        return IDLE if connection.vendor == "postgresql" and self.listener.raw is not None else POLL_MAX

    def step(self, *, timer_expired: bool) -> float:
        """Look at the watched kinds, wake those due; return seconds to sleep. A timer round looks only at
        the kinds whose own time came (nothing said the others' due times changed)."""
        longest = sleep = self.longest_sleep()
        now = time.monotonic()
        for spec in self.specs if self.specs is not None else registered_watches():
            looked_at, own = self._looked.get(spec.name, (now, 0.0))
            later = looked_at + min(own, longest) - now  # the longest may have shrunk (LISTEN lost)
            if timer_expired and later > 0.005:  # the wait's granularity
                sleep = min(sleep, later)
                continue
            try:
                own = self._look(spec, longest, timer_expired=timer_expired)
            except Exception as error:
                if is_cut_off(error):
                    raise  # the link is gone for every kind: run() reconnects
                # One kind's failure (not migrated, a failed enqueue) must not blind the watcher to the others.
                logger.exception("event=watch_failed name=%s: its due times are unknown this round", spec.name)
                own = min(longest, POLL_MAX)
            self._looked[spec.name] = (now, own)
            sleep = min(sleep, own)
        if not self._overdue_seen and sleep > GRACE:
            self._poll = GRACE  # nothing overdue: the next overdue round starts short again
        return max(0.0, min(sleep, longest))

    def _look(self, spec: WatchSpec, sleep: float, *, timer_expired: bool) -> float:
        """One kind's part of a round: wake it if it is due and nobody is on it; return the shorter sleep."""
        paused = _paused.get(spec.name, 0.0) - time.monotonic()
        # Paused (a task here is on it), nothing due or due later: not overdue, so a grace starts afresh.
        left = default_clock.seconds_until(spec.next_due(), connection.alias) if paused <= 0 else paused
        if left is None or left > 0:
            self._overdue_seen.discard(spec.name)
            return sleep if left is None else min(sleep, left)
        # Due, reached by our timer or seen due twice: nobody is on it. Asked every round while it stays
        # due, so a lost task's request lapses (REQUEST_LAPSE) and the next ask wins.
        if timer_expired or spec.name in self._overdue_seen:
            spec.wake()
            self._overdue_seen.discard(spec.name)
            pause, self._poll = self._poll, min(self._poll * 2, POLL_MAX)
            return min(sleep, pause)
        self._overdue_seen.add(spec.name)
        return min(sleep, GRACE)

    def run(self) -> None:
        timer_expired = False
        while not self._stop.is_set():
            try:
                sleep = self.step(timer_expired=timer_expired)
                note_answer()  # the round's queries answered: an outage this process saw is over
                timer_expired = not self._wait(sleep)
            except Exception as error:  # the watcher outlives a dropped connection or a failed enqueue
                note_failure(error)  # its LISTEN is often the first in the process to see the server go
                logger.exception("wake watcher round failed; retrying")
                self._reset_connection()
                timer_expired = False
                self._stop.wait(POLL_MAX)
        self._reset_connection()

    def _wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; return True if a notification (or stop) cut the sleep short."""
        if self.listener.connect():
            if self.listener.polling:  # poll until the next reconnect
                _record("poll", "a probe NOTIFY did not arrive on the LISTEN connection (a transaction pooler?)")
            else:
                _record("listen", "notifications arrive")
        if self.listener.raw is None:  # SQLite, or notifications do not arrive: poll (the sleep is bounded)
            return self._stop.wait(seconds)
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():  # slices of 1 s, so that stop() is seen
            if (left := deadline - time.monotonic()) <= 0:
                return False
            heard = self.listener.read(min(left, 1.0))
            if ARRIVAL in heard:
                _arrived()  # for a task lingering in this process; due times did not change
            if any(payload != ARRIVAL and not payload.startswith("probe:") for payload in heard):
                return True
        return True

    def _reset_connection(self) -> None:
        self.listener.reset()
        close_quietly(connection)  # reopened by the next round


def close_quietly(conn: Any) -> None:
    """Close `conn` if there is one; closing a broken connection may fail too, and it is dropped either way."""
    try:
        if conn is not None:
            conn.close()
    except Exception:
        logger.debug("closing a connection failed", exc_info=True)


_started: Watcher | None = None
_start_lock = threading.Lock()


def start_watcher(**_signal: Any) -> Watcher | None:
    """Start this process's watcher thread once (a django-q2 `post_spawn` receiver), unless WAKE_WATCHER is off."""
    global _started
    if not weave_settings.WAKE_WATCHER:
        return None
    with _start_lock:
        if _started is None:
            _started = Watcher()
            threading.Thread(target=_started.run, name="weave-wake-watcher", daemon=True).start()
    return _started

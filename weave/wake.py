"""Wake the workers when work becomes due: coalesced task requests and the due-time watcher.

Two parts, both owned by Weave rather than by the task queue:

- `request_once(name, enqueue=...)` coalesces requests for one kind of task. It moves the
  `WakeRequest` row's `queued_until` forward in one guarded statement; only the caller whose statement
  changed the row enqueues. The task calls `task_started(name)` first thing, which frees the slot, so
  work that arrives while it runs asks for (and gets) another task. Nothing here reads the broker, so
  it works the same with django-q2's ORM and Redis brokers (or any other queue).

- A `Watcher` thread runs inside every django-q2 worker process (started on django-q2's `post_spawn`
  signal). It never does the work: it sleeps until the earliest time any registered kind of work becomes
  due by the database clock (a retry's due time, a lapsed lease) and then asks for a task through the
  app's coalesced request. The worker process stays free for tasks while its watcher sleeps. On
  PostgreSQL it sleeps in `LISTEN weave_wake` on a connection of its own (WAKE_LISTEN_DB), so a task
  that changes due times (`tell_watchers()`) or a new request (`request_once`) wakes it at once. A probe
  NOTIFY checks that notifications arrive there; behind a transaction pooler they don't, and the
  watcher polls every WAKE_POLL_MAX instead, saying so once. On SQLite it polls with backoff.
  While due work stays undone it asks again every round, so a lost or stuck task is replaced once its
  request's hold lapses.

Apps register what they watch in `AppConfig.ready()`:

    register_watch(WatchSpec(name="notifications", next_due=..., wake=enqueue_drain))
"""

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q

from weave.conf import weave_settings
from weave.leases import DbNow, default_clock
from weave.leases.clock import postgres_now_plus
from weave.reports import note_answer, note_failure
from weave.worker_db import is_cut_off

logger = logging.getLogger("weave.wake")

CHANNEL = "weave_wake"  # the PostgreSQL NOTIFY channel
# Told only when a request enqueued a task: a broker's idle wait listens here (`TaskRequestWait`), so it is
# not woken by every arrival and due-time change the watchers hear.
TASK_CHANNEL = "weave_tasks"
# The payload of a request that a waiting or running task already covers: new work for a task that is
# lingering in some worker process. A watcher hands it to its own process (`on_arrival`) and does not
# treat it as a change of due times, so a stream of such requests costs the watchers no queries.
ARRIVAL = "arrived"
# Called (on the watcher's thread) each time this process's watcher hears ARRIVAL.
_arrival_callbacks: list[Callable[[], None]] = []
_arrival_lock = threading.Lock()


# --- coalesced task requests ---------------------------------------------------------------------------


def request_once(name: str, *, enqueue: Callable[[], None], hold: float | None = None) -> bool:
    """Enqueue the task named `name` unless one is already waiting; return whether this call enqueued it.

    The decision is one guarded UPDATE (`queued_until` empty or in the past, by the database clock), so
    of any number of concurrent callers exactly one enqueues. The slot is held for `hold` seconds
    (WEAVE WAKE_HOLD) or until the task starts, whichever comes first.

    This never raises for the broker. It runs after the caller's row is committed (`on_commit`), and
    that commit is the promise: an enqueue that fails is logged, its slot freed, and the watchers are
    told, so one of them (in a worker process, which can reach the broker) asks again within a second.
    A caller that saw an error would retry and store its row twice.
    """
    from weave.models import WakeRequest

    hold = _hold(hold)
    won, covered = _claim_slot(name, hold)
    if not won:
        if covered:
            return False
        try:
            with transaction.atomic():
                WakeRequest.objects.create(name=name, queued_until=DbNow(timedelta(seconds=hold)), requests=1)
        except IntegrityError:
            return False  # a concurrent first request created the row: it enqueues, not us
    return _enqueue_won(name, enqueue)


def _hold(hold: float | None) -> float:
    return float(weave_settings.WAKE_HOLD if hold is None else hold)


def _enqueue_won(name: str, enqueue: Callable[[], None]) -> bool:
    """This caller took the slot of `name`, and the statement that took it has committed: enqueue."""
    from weave.models import WakeRequest

    try:
        enqueue()
    except Exception as error:
        # Nothing was queued: free the slot, or every request would be swallowed until `hold` passed.
        logger.warning(
            "event=enqueue_failed name=%s error=%s: the work is stored; the watchers will ask again",
            name,
            type(error).__name__,
            exc_info=True,
        )
        WakeRequest.objects.filter(name=name).update(queued_until=None)
        _tell_watchers_quietly()
        return False
    # The watchers sleep until the next due time they know of; this work is due now. Told, they
    # look again within the grace, and keep asking while it stays due (a lost or stuck task). The
    # broker's idle wait is told in the same statement: the task is there to be taken.
    _tell_watchers_quietly(task=True)
    return True


def _claim_slot(name: str, hold: float) -> tuple[bool, bool]:
    """Take the request slot of `name` if it is free: (taken, covered). Covered: the row exists and its
    slot is held, so a queued or lingering task already covers the new work (and was told, on PostgreSQL).
    Neither: there is no row yet.

    On PostgreSQL this is one statement: the guarded UPDATE, and, when it took nothing, the existence
    check that carries the NOTIFY for a lingering task (it hears it through its process's watcher,
    `on_arrival`). The hand-over of every push makes this call, so the round trip it saves is per push."""
    from weave.models import WakeRequest

    if connection.vendor != "postgresql":
        until = DbNow(timedelta(seconds=hold))
        free = Q(queued_until__isnull=True) | Q(queued_until__lte=DbNow())
        rows = WakeRequest.objects.filter(name=name)
        if rows.filter(free).update(queued_until=until, requests=F("requests") + 1) == 1:
            return True, False
        return False, rows.exists()
    claim = slot_claim_sql(name, hold=hold)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {claim.with_sql} SELECT {claim.select_sql}", [*claim.with_params, *claim.select_params])
        won, covered = cursor.fetchone()
    return bool(won), bool(covered)


@dataclass(frozen=True)
class SlotClaimSQL:
    """The slot claim of `request_once` as two pieces of PostgreSQL, for a caller that puts it in a statement
    of its own (an INSERT of the work, say) so that the work and its request commit together, in one trip.

    `with_sql` is one element of a WITH list (it names the CTE `alias`); `select_sql` is two boolean
    select-list columns, (taken, covered) as `_claim_slot` returns them. Their parameters go in the order
    the pieces stand in the statement. The statement must end in its own commit (autocommit): the UPDATE
    holds the request row's lock until then, and every other request for `name` waits for it.
    """

    with_sql: str
    with_params: tuple[Any, ...]
    select_sql: str
    select_params: tuple[Any, ...]


def slot_claim_sql(name: str, *, hold: float | None = None, alias: str = "won", only_if: str = "TRUE") -> SlotClaimSQL:
    """The PostgreSQL pieces that claim the request slot of `name` inside another statement (`SlotClaimSQL`).

    `only_if` is a further condition of the claim, SQL without parameters (the statement's INSERT made a
    row, say: a slot taken for no work would hold off every request until it lapsed). The request row
    lives on the default database: the statement must run there. After it committed, hand its two
    columns to `finish_claim`."""
    with_sql, select_sql = _slot_claim_text(alias, only_if)
    return SlotClaimSQL(
        with_sql=with_sql,
        with_params=(_hold(hold), name),
        select_sql=select_sql,
        select_params=(CHANNEL, ARRIVAL, name),
    )


@functools.cache
def _slot_claim_text(alias: str, only_if: str) -> tuple[str, str]:
    # Made once per process: the hand-over asks for it on every push, and the text never changes (the
    # table's quoted name through the connection proxy, two formats).
    from weave.models import WakeRequest

    table = connection.ops.quote_name(WakeRequest._meta.db_table)
    return (
        _CLAIM_SLOT_WITH.format(table=table, alias=alias, only_if=only_if),
        _CLAIM_SLOT_COLUMNS.format(table=table, alias=alias),
    )


def finish_claim(
    name: str, taken: bool, covered: bool, *, enqueue: Callable[[], None], hold: float | None = None
) -> bool:
    """Finish a request whose slot claim (`slot_claim_sql`) ran in a statement that has committed; return
    whether this call enqueued. Taken: enqueue, as `request_once` does. Covered: nothing more. Neither
    (no request row yet, the first request ever): `request_once`, which makes the row."""
    if taken:
        return _enqueue_won(name, enqueue)
    if covered:
        return False
    return request_once(name, enqueue=enqueue, hold=hold)


# The UPDATE runs to completion whatever the SELECT reads (a data-modifying WITH always does); the
# SELECT sees the row as it was before it, so a held row is found and told. pg_notify runs once per
# matching row: only when the row exists and the UPDATE took nothing, so a winner or a first request
# is not told "arrived" (the winner announces its new task instead).
_CLAIM_SLOT_WITH = (
    "{alias} AS ("
    " UPDATE {table} SET queued_until = " + postgres_now_plus("%s") + ", requests = requests + 1"
    " WHERE name = %s AND (queued_until IS NULL OR queued_until <= clock_timestamp()) AND ({only_if}) RETURNING 1)"
)
_CLAIM_SLOT_COLUMNS = (
    "EXISTS (SELECT 1 FROM {alias}),"
    " (SELECT count(pg_notify(%s, %s)) FROM {table} WHERE name = %s AND NOT EXISTS (SELECT 1 FROM {alias})) > 0"
)


def on_arrival(callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` each time this process's watcher hears that new work was requested; return the
    function that stops it.

    A callback, not a flag to clear and wait on: nothing is cleared, so an arrival heard while the
    subscriber is busy (claiming, or between two waits) is never lost. The subscriber posts it to
    whatever it waits on (a lingering drain: its inbox, which keeps it until taken). Callbacks run on
    the watcher's thread and must not block.
    """
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


def keep_slot_taken(name: str, seconds: float) -> None:
    """Hold the request slot of `name` for `seconds` more: a running task covers new work meanwhile.

    A task that renews its hold while it runs (and looks for new rows) keeps a steady arrival rate
    from enqueueing one task per row; if it dies, the hold lapses and the watchers ask again.
    """
    from weave.models import WakeRequest

    until = DbNow(timedelta(seconds=seconds))
    if WakeRequest.objects.filter(name=name).update(queued_until=until):
        return
    try:  # started by a sweep or by hand, never requested: the row may not exist yet
        with transaction.atomic():
            WakeRequest.objects.create(name=name, queued_until=until)
    except IntegrityError:
        WakeRequest.objects.filter(name=name).update(queued_until=until)


def free_slot(name: str) -> None:
    """Free the request slot of `name`: its running task stops covering new work (it is ending)."""
    from weave.models import WakeRequest

    WakeRequest.objects.filter(name=name).update(queued_until=None)


def _tell_watchers_quietly(*, task: bool = False) -> None:
    try:
        tell_watchers(task=task)
    except Exception:  # the database may be down too: the watchers' own timers still run
        logger.debug("could not notify the watchers", exc_info=True)


def task_started(name: str, *, forget: bool = False) -> None:
    """Free the request slot of `name`: the queued task is running now. `forget` deletes the row instead
    (for per-job names that would otherwise pile up)."""
    from weave.models import WakeRequest

    rows = WakeRequest.objects.filter(name=name)
    if forget:
        rows.delete()
    else:
        rows.filter(queued_until__isnull=False).update(queued_until=None)


def tell_watchers(*, task: bool = False) -> None:
    """Tell the watchers that due times changed (a task ended, a job was released). PostgreSQL only.

    `task`: a task was just enqueued; the brokers' idle waits (`TaskRequestWait`) are told too, in the same
    statement. Inside a transaction the notifications are delivered when it commits, never before.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        if task:
            cursor.execute("SELECT pg_notify(%s, ''), pg_notify(%s, '')", [CHANNEL, TASK_CHANNEL])
        else:
            cursor.execute(f"NOTIFY {CHANNEL}")


def seconds_until(when: datetime | None) -> float | None:
    """Seconds from the database's now until `when` (negative: overdue); None for None."""
    return default_clock.seconds_until(when, connection.alias)


# --- what is watched -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchSpec:
    """One kind of work the watcher keeps an eye on.

    `next_due()` returns the earliest database time at which some job of this kind becomes claimable
    (due time reached, or its lease lapsed), or None when there is none; `wake()` asks for a task to do
    the due work and must be coalesced (cheap to call often).
    """

    name: str
    next_due: Callable[[], datetime | None]
    wake: Callable[[], object]


_watches: dict[str, WatchSpec] = {}


def register_watch(spec: WatchSpec) -> None:
    _watches[spec.name] = spec


def registered_watches() -> list[WatchSpec]:
    return [_watches[name] for name in sorted(_watches)]


# Watched kinds that a task in this process is claiming itself: name -> time.monotonic() it says so until.
_paused: dict[str, float] = {}


def pause_watch(name: str, seconds: float) -> None:
    """Say that a task in this process claims the due work of the watched kind `name` as fast as it has
    room, for the next `seconds`: it has a backlog, so it will take every due row, lapsed leases included.

    This process's watcher does not look at that kind meanwhile. Its look is an aggregate over every
    pending row, and during a backlog it found the kind overdue every round (up to once a second, in
    every worker) and asked for a task the busy cluster could not start. A drain renews this at each
    claim that finds more due than it took; when it stops, the kind is looked at again within `seconds`.
    Other processes' watchers are not told: they go on looking, and asking for helpers.
    """
    _paused[name] = time.monotonic() + seconds


def _paused_for(name: str) -> float:
    """Seconds the watch of `name` stays paused in this process (0 or less: not paused)."""
    return _paused.get(name, 0.0) - time.monotonic()


# --- where the watcher hears notifications ------------------------------------------------------------


@dataclass
class ListenState:
    """Whether this process's watcher hears NOTIFY, as its last probe found (for checks and the dashboard)."""

    mode: str = "unknown"  # "listen": notifications arrive; "poll": they don't, the watcher polls
    reason: str = ""
    since: float = 0.0  # time.time() of the probe


_state = ListenState()
_poll_warned = False


def listen_state() -> ListenState:
    return _state


def listen_target() -> tuple[str, str]:
    """("dsn", text) or ("alias", name) for the session connection the watchers LISTEN on (WAKE_LISTEN_DB)."""
    target = str(weave_settings.WAKE_LISTEN_DB or "").strip()
    if "=" in target or "://" in target:
        return "dsn", target
    return "alias", target or "default"


def open_listener(channel: str = CHANNEL) -> Any:
    """A new psycopg connection in autocommit, LISTENing on `channel`, used for nothing else.

    Its own connection, not the thread's Django one: notifications are then only ever read through
    `notifies()`, one psycopg API per connection, and queries never swallow them. Behind a
    transaction pooler, name a direct connection in WAKE_LISTEN_DB (an alias or a DSN).
    """
    import psycopg
    from django.db import connections

    kind, target = listen_target()
    if kind == "dsn":
        raw = psycopg.connect(target, autocommit=True)
    else:
        params = connections[target].get_connection_params()
        raw = psycopg.connect(**params, autocommit=True)
    raw.execute(f"LISTEN {channel}")
    return raw


def probe_listener(raw: Any, *, timeout: float | None = None, channel: str = CHANNEL) -> bool:
    """Send a NOTIFY through the site's own connection and say whether `raw` hears it within `timeout`.

    Through a transaction pooler the LISTEN lands on a server session the pooler hands to others, so the
    probe never arrives: that is how the watchers find out they must poll.
    """
    token = f"probe:{uuid.uuid4().hex}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, token])
    deadline = time.monotonic() + float(weave_settings.WAKE_PROBE_TIMEOUT if timeout is None else timeout)
    while (left := deadline - time.monotonic()) > 0:
        heard = [notify.payload for notify in raw.notifies(timeout=left, stop_after=1)]
        if ARRIVAL in heard:
            _arrived()  # heard while probing: still this process's lingering task's
        if token in heard:
            return True
    return False


def _record(mode: str, reason: str) -> None:
    global _poll_warned
    _state.mode, _state.reason, _state.since = mode, reason, time.time()
    _store_probe(mode, reason)
    if mode == "poll" and not _poll_warned:
        _poll_warned = True
        logger.warning(
            "event=wake_polling reason=%s: the watchers poll due times every %g s instead of listening. "
            "Behind a transaction pooler, set WEAVE['WAKE_LISTEN_DB'] to a direct connection.",
            reason,
            float(weave_settings.WAKE_POLL_MAX),
        )


def _store_probe(mode: str, reason: str) -> None:
    """Keep this process's probe result where the dashboard and the metrics read it (best effort)."""
    import os
    import socket

    from weave.models import WatcherProbe

    try:
        WatcherProbe.objects.update_or_create(
            process=f"{socket.gethostname()}:{os.getpid()}"[:200],
            defaults={"mode": mode, "reason": reason, "probed_at": DbNow()},
        )
    except Exception:  # a missing table (not migrated yet) must not stop the watcher
        logger.debug("could not store the watcher's probe", exc_info=True)


def listen_report(max_age: float = 3600.0) -> dict[str, Any]:
    """Watchers that probed within `max_age` seconds: how many listen, how many poll, and why (dashboard)."""
    from weave.models import WatcherProbe

    recent = WatcherProbe.objects.filter(probed_at__gte=DbNow(timedelta(seconds=-max_age)))
    polling = list(recent.filter(mode="poll").order_by("process").values("process", "reason", "probed_at"))
    return {"listening": recent.filter(mode="listen").count(), "polling": len(polling), "polling_watchers": polling}


class TaskRequestWait:
    """Sleep until a task is requested (a NOTIFY on `weave_tasks`), at most a given time: a broker's idle wait.

    django-q2's ORM broker polls for new tasks; in between it sleeps `poll` seconds, and the first drain
    after a quiet spell waited that sleep out. Every coalesced request that enqueues says so on
    `weave_tasks` (`request_once`), so a broker that waits here takes the task as soon as its row is in.
    The LISTEN connection stays open between waits: a request made while the broker was querying is
    heard at the next wait, none is lost. Only the first wait after (re)opening returns at once, since
    a request just before the LISTEN was not heard. Arrivals (covered requests) and due-time changes go
    to `weave_wake` and ring nothing here.
    On SQLite, or when the connection fails, it sleeps the whole time. A LISTEN that does not hear its
    own probe (a transaction pooler) is closed at once, never left on a pooled session, and the wait
    only sleeps from then on: the broker polls as before.
    """

    def __init__(self) -> None:
        self._raw: Any = None
        self._deaf = False

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; return True if a request (or the (re)opening of the LISTEN) cut it short."""
        deadline = time.monotonic() + seconds
        if connection.vendor != "postgresql" or self._deaf:
            time.sleep(seconds)
            return False
        try:
            if self._raw is None:
                self._raw = open_listener(TASK_CHANNEL)
                if not probe_listener(self._raw, channel=TASK_CHANNEL):
                    self._deaf = True
                    self.close()
                    logger.warning("event=request_bell_deaf: the broker polls its queue (a transaction pooler?)")
                return True  # look again first: a request made before the LISTEN was not heard
            if any(True for _ in self._raw.notifies(timeout=seconds, stop_after=1)):
                return True
        except Exception:  # the broker's own queries report a database outage; here, sleep and reopen
            logger.debug("the task-request wait's LISTEN failed; sleeping instead", exc_info=True)
            self.close()
            time.sleep(max(0.0, deadline - time.monotonic()))
        return False

    def close(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            try:
                raw.close()
            except Exception:
                logger.debug("closing the task-request wait's LISTEN connection failed", exc_info=True)


# --- the watcher thread --------------------------------------------------------------------------------


# A timer round wakes the kind whose time it was a hair late or early (the wait's own granularity).
_TIMER_SLACK = 0.005


class Watcher:
    """Sleep until the earliest due time of every watched kind of work, then ask for a task.

    `step()` does one round and returns how long to sleep; `run()` loops until `stop()`. A due time
    reached by waiting for it is acted on at once; work found due right after a notification gets a short
    grace first (WEAVE WAKE_GRACE), because the task that sent the notification is usually claiming it.
    """

    def __init__(self, specs: list[WatchSpec] | None = None) -> None:
        self.specs = specs
        self._stop = threading.Event()
        self._listener: Any = None
        self._hears = False  # the last probe arrived: LISTEN works, long sleeps are safe
        self._polling = False  # the last probe did not: poll until a reconnect probes again
        self._overdue_seen: set[str] = set()
        self._looked: dict[str, tuple[float, float]] = {}  # kind -> (monotonic time of its last look, its sleep then)
        self._poll = float(weave_settings.WAKE_GRACE)
        self.rounds = 0
        self.wakes = 0

    def stop(self) -> None:
        self._stop.set()

    def longest_sleep(self) -> float:
        """WAKE_IDLE while notifications are heard; otherwise (SQLite, a pooler) WAKE_POLL_MAX."""
        if connection.vendor == "postgresql" and self._hears:
            return float(weave_settings.WAKE_IDLE)
        return float(weave_settings.WAKE_POLL_MAX)

    def step(self, *, timer_expired: bool) -> float:
        """Look at the watched kinds, wake those due; return seconds to sleep (bounded).

        After a notification (due times changed) every kind is looked at. When the round was reached by
        the timer, only the kinds whose own time came are: the others' due times did not change (nothing
        said so), and looking at them again cost one aggregate query each, every round that another kind
        (an overdue one, or one covered by a drain here) kept short. Each kind is still looked at within
        the longest sleep, as a lone kind would be."""
        self.rounds += 1
        grace = float(weave_settings.WAKE_GRACE)
        longest = self.longest_sleep()
        now = time.monotonic()
        sleep = longest
        for spec in self.specs if self.specs is not None else registered_watches():
            looked_at, own = self._looked.get(spec.name, (now, 0.0))
            later = looked_at + min(own, longest) - now  # the longest may have shrunk since (LISTEN lost)
            if timer_expired and later > _TIMER_SLACK:
                sleep = min(sleep, later)
                continue
            try:
                own = self._look(spec, longest, timer_expired=timer_expired, grace=grace)
            except Exception as error:
                if is_cut_off(error):
                    raise  # the link is gone for every kind: run()'s recovery reconnects
                # One kind's failure (its table not migrated yet, a bad query, a failed enqueue) must not
                # blind the watcher to the others: log it, look again soon, go on with the rest.
                logger.exception("event=watch_failed name=%s: its due times are unknown this round", spec.name)
                own = min(longest, float(weave_settings.WAKE_POLL_MAX))
            self._looked[spec.name] = (now, own)
            sleep = min(sleep, own)
        if not self._overdue_seen and sleep > grace:
            self._poll = grace  # nothing overdue any more: the next overdue round starts short again
        return max(0.0, min(sleep, longest))

    def _look(self, spec: WatchSpec, sleep: float, *, timer_expired: bool, grace: float) -> float:
        """One kind's part of a round: wake it if it is due and nobody is on it; return the shorter sleep."""
        paused = _paused_for(spec.name)
        if paused > 0:
            # A task here is on it (`pause_watch`): no look, and the grace starts afresh when the pause ends.
            self._overdue_seen.discard(spec.name)
            return min(sleep, paused)
        left = seconds_until(spec.next_due())
        if left is None:
            self._overdue_seen.discard(spec.name)
            return sleep
        if left > 0:
            self._overdue_seen.discard(spec.name)
            return min(sleep, left)
        # Due now. Reached by our own timer, or seen due twice in a row: nobody is on it, ask for a task.
        # Asked again every round (at most WAKE_POLL_MAX apart) while it stays due: a request whose
        # task was lost or sits behind a busy cluster lapses after WAKE_HOLD, and the next ask wins.
        if timer_expired or spec.name in self._overdue_seen:
            self.wakes += 1
            spec.wake()
            self._overdue_seen.discard(spec.name)
            pause, self._poll = self._poll, min(self._poll * 2, float(weave_settings.WAKE_POLL_MAX))
            return min(sleep, pause)
        self._overdue_seen.add(spec.name)
        return min(sleep, grace)

    def run(self) -> None:
        timer_expired = False
        while not self._stop.is_set():
            try:
                sleep = self.step(timer_expired=timer_expired)
                note_answer()  # the round's queries answered: an outage this process saw is over
                timer_expired = not self._wait(sleep)
            except Exception as error:  # the watcher must outlive a dropped connection or a failed enqueue
                note_failure(error)  # its LISTEN connection is the first in the process to see the server go
                logger.exception("wake watcher round failed; retrying")
                self._reset_connection()
                timer_expired = False
                self._stop.wait(float(weave_settings.WAKE_POLL_MAX))
        self._reset_connection()

    def _wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; return True if a notification (or stop) cut the sleep short."""
        if connection.vendor != "postgresql":
            return self._stop.wait(seconds)
        raw = self._listen()
        if raw is None:  # notifications don't arrive here: poll (the sleep is already bounded)
            return self._stop.wait(seconds)
        deadline = time.monotonic() + seconds
        # Short slices so that stop() is seen within a second even while LISTENing.
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # Everything one read brought in, taken whole: leaving the generator at the first change of
            # due times would drop the rest of its packet, an arrival among them.
            heard = [n.payload for n in raw.notifies(timeout=min(left, 1.0), stop_after=1)]
            if ARRIVAL in heard:
                _arrived()  # for a task lingering in this process; due times did not change
            if any(payload != ARRIVAL and not payload.startswith("probe:") for payload in heard):
                return True
        return True

    def _listen(self) -> Any:
        """The listening connection, opened and probed once per (re)connect; None while polling."""
        if self._polling:
            return None
        if self._listener is None:
            self._listener = open_listener()
            try:
                self._hears = probe_listener(self._listener)
            except Exception:
                self._close_listener()
                raise
            if self._hears:
                _record("listen", "notifications arrive")
            else:
                # A connection that hears nothing is of no use: close it, poll until the next reconnect.
                self._close_listener()
                self._polling = True
                _record("poll", "a probe NOTIFY did not arrive on the LISTEN connection (a transaction pooler?)")
        return self._listener

    def _close_listener(self) -> None:
        raw, self._listener, self._hears = self._listener, None, False
        if raw is not None:
            try:
                raw.close()
            except Exception:
                logger.debug("closing the watcher's LISTEN connection failed", exc_info=True)

    def _reset_connection(self) -> None:
        self._close_listener()
        self._polling = False
        try:
            connection.close()
        except Exception:  # closing a broken connection may fail too; the next round reconnects
            logger.debug("closing the watcher's connection failed", exc_info=True)


_started: Watcher | None = None
_start_lock = threading.Lock()


def start_watcher(**_signal: Any) -> Watcher | None:
    """Start this process's watcher thread once (a django-q2 `post_spawn` receiver). WEAVE WAKE_WATCHER."""
    global _started
    if not weave_settings.WAKE_WATCHER:
        return None
    with _start_lock:
        if _started is None:
            _started = Watcher()
            threading.Thread(target=_started.run, name="weave-wake-watcher", daemon=True).start()
    return _started

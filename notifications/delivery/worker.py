"""The push worker: a claim buffer, a sender and a completer, with the send slots kept full.

    report = drain()                      # what the django-q2 task runs
    report = deliver_batch(clock=clock)   # one claim only; tests inject a FakeClock, backends and hooks

Three parts, each in its own module, and this loop that feeds them:

- the claim buffer (`claims`) claims `batch_size` due rows whenever no backend has more than its
  window of rows left to it, keeps their leases alive and hands back the rows never started;
- the sender (`sender`) runs an event loop on a thread of its own and never waits on the database;
- the completer (`completer`) finishes answers behind their rows' guards, a group per transaction.
  On PostgreSQL, outside a transaction, it has its own thread and connection, so the worker's thread
  goes on claiming and starting sends while a finish is written. Inside a transaction (a test's) or
  on SQLite it runs on the worker's thread, whose connection sees and holds everything.

The loop starts a row whenever a slot of its backend's window is free, after the budget, breaker and
lease checks (a backend whose window is full holds back only its own rows), and
hands each batch of answers to the completer as it arrives. A drain that runs dry may linger
(`Lingering`): the same loop, sender, completer and backends (with their open connections) wait
for new rows and claim them as they arrive, woken by the arrival itself when the task can hear it.
"""

import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from django.db import connection

from notifications import queue
from notifications.backends import PushBackend, PushMessage, SendResult, backend_aliases, get_backend
from notifications.delivery.breaker import HALF_OPEN, BreakerRule, Breakers, CircuitBreaker
from notifications.delivery.claims import ClaimBuffer
from notifications.delivery.completer import (
    DONE,
    FAILED_WITH,
    Completer,
    CompleterThread,
    Finished,
    count,
    count_unsent,
)
from notifications.delivery.inbox import Inbox
from notifications.delivery.report import DeliveryReport, Hooks
from notifications.delivery.rows import JOB, Claim, Row, log_lost, logger
from notifications.delivery.sender import ANSWER, AsyncSender, build_result_missing
from notifications.devices import Unsendable, unsendable
from notifications.models import BreakerOpening, Notification
from notifications.quiet import deferral_reason, quiet_until
from weave import workers
from weave.conf import weave_settings
from weave.edge import outside_text
from weave.events import log_event
from weave.jobs import RetryPolicy
from weave.leases import BatchLease, Clock, default_clock, new_owner

__all__ = ["DeliveryReport", "Hooks", "Lingering", "PushWorker", "WorkerOptions", "deliver_batch", "drain"]

# If nothing was due, look again (real time) while sends are still out, so a drain picks up rows
# created meanwhile instead of ending with them queued: soon after a look that found rows (a steady
# stream is served within milliseconds), then less and less often, up to the longest gap.
_RECHECK_SECONDS = (0.01, 0.25)
# How long the completer's thread waits for more answers before it writes a group; longer while rows
# wait for a free slot: their wait is the slots', not the finish's, and fewer, larger transactions
# leave more CPU to the sends (each such row's `delivered_at` comes up to that much later).
_GATHER_SECONDS = 0.002
_BACKLOG_GATHER_SECONDS = 0.010
# What the inbox carries when the task hears that new rows were requested (`PushWorker.arrived`).
ARRIVED = "arrived"


@dataclass(frozen=True)
class Lingering:
    """How a drain that ran dry goes on claiming new rows on the same loop, sender, completer and
    backends (with their open connections), and the task it tells (`task`, optional)."""

    seconds: float = 0.0  # real seconds to go on after the last claim that found rows (0: end when idle)
    poll: float = _RECHECK_SECONDS[1]  # the longest gap between two looks while nothing is out
    task: workers.LingeringTask | None = None


class PushWorker:
    """One worker's drain: claim rows under one owner and deliver them within a time budget."""

    def __init__(
        self,
        *,
        clock: Clock = default_clock,
        owner: str | None = None,
        hooks: Hooks | None = None,
        batch_size: int | None = None,
        concurrency: int | None = None,
        budget: float | None = None,
        ttl: float | None = None,
        rng: random.Random | None = None,
        backends: Mapping[str, PushBackend] | None = None,
        linger: float | Lingering = 0.0,
    ) -> None:
        conf = weave_settings
        # How `run()` goes on looking for new rows after the last ones it found (seconds; 0: end at once).
        self.lingering = linger if isinstance(linger, Lingering) else Lingering(seconds=linger)
        self.clock = clock
        self.owner = owner or new_owner("push:")
        self.hooks = hooks or Hooks()
        self.batch_size = batch_size or conf.PUSH_BATCH_SIZE
        self.budget = conf.PUSH_BUDGET if budget is None else budget
        self.ttl = float(ttl or conf.PUSH_LEASE_TTL)
        timeout = conf.PUSH_TIMEOUT
        # Renew when less than this is left: enough for one more request to time out and be finished,
        # but never so much that every send renews.
        renew_margin = min(self.ttl / 2, max(self.ttl / 3, timeout + 1))
        self.buffer = ClaimBuffer(owner=self.owner, clock=clock, ttl=self.ttl, renew_margin=renew_margin)
        retry = RetryPolicy(
            max_attempts=conf.PUSH_MAX_ATTEMPTS, backoff=conf.PUSH_BACKOFF_BASE, backoff_max=conf.PUSH_BACKOFF_MAX
        )
        self.completer = Completer(
            owner=self.owner, clock=clock, retry=retry, rng=rng or random.Random(), hooks=self.hooks
        )
        self.breakers = Breakers(
            BreakerRule(
                window=conf.PUSH_BREAKER_WINDOW,
                min_answers=conf.PUSH_BREAKER_MIN_ANSWERS,
                ratio=conf.PUSH_BREAKER_RATIO,
                run=conf.PUSH_BREAKER_RUN,
                cooldown=conf.PUSH_BREAKER_COOLDOWN,
                cap=conf.PUSH_BACKOFF_MAX,
                origin_cap=conf.PUSH_ORIGIN_HOLD_MAX,
            )
        )
        self.first_opening = ""  # why the first breaker of this worker opened
        window = max(1, concurrency) if concurrency else None
        if backends is None:
            # Built (and checked) before any row is claimed: a misconfigured backend is not the rows' fault.
            backends = {alias: get_backend(alias, timeout=timeout, concurrency=window) for alias in backend_aliases()}
        self.backends = dict(backends)
        # Each backend has a window of its own (`concurrency` given here, else the one it was built with:
        # PUSH_HTTP2_CONCURRENCY on HTTP/2, PUSH_CONCURRENCY on HTTP/1.1). A backend whose window is full
        # holds back only its own rows; the worker's window is their sum.
        self.fallback_window = window or int(conf.PUSH_CONCURRENCY)
        self.windows = {
            alias: window or max(1, int(getattr(backend, "concurrency", self.fallback_window)))
            for alias, backend in self.backends.items()
        }
        self.concurrency = sum(self.windows.values()) or self.fallback_window
        self.inbox = Inbox()
        self.sender = AsyncSender(backends, missing=build_result_missing, inbox=self.inbox)
        self._budget_ends = clock.monotonic() + self.budget
        self._claims: dict[int, tuple[Claim, list[Row]]] = {}  # claimed by claim(), not yet delivered
        self._closed = False
        # Devices this worker deactivated: their other rows in its claims are not sent.
        self._dead_devices: dict[Any, str] = {}

    # --- public -------------------------------------------------------------------------------------

    @property
    def budget_spent(self) -> bool:
        return self.clock.monotonic() >= self._budget_ends

    def arrived(self) -> None:
        """Say that new rows were requested (any thread): a lingering `run()` looks at once."""
        self.inbox.post(ARRIVED, None)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sender.close()

    def claim(self, limit: int | None = None) -> BatchLease:
        """Claim up to `limit` due rows under this worker's owner, one statement; each row's fence is bumped."""
        claim, rows = self.buffer.claim(limit or self.batch_size)
        self._claims[id(claim.batch)] = (claim, rows)
        return claim.batch

    def deliver(self, batch: BatchLease) -> DeliveryReport:
        """Send every row of `batch` (a claim of this worker's) and finish each as its answer arrives."""
        claim, rows = self._claims.pop(id(batch), (None, []))
        if claim is None:
            raise RuntimeError("PushWorker.deliver() needs a batch from this worker's claim().")
        report = DeliveryReport(owner=self.owner, batches=1, claimed=len(rows))
        _Pump(self, report, more_claims=False).run(rows)
        return report

    def run(self) -> DeliveryReport:
        """Deliver due rows until none are left or the budget is spent (an open breaker holds only its scope)."""
        report = DeliveryReport(owner=self.owner)
        _Pump(self, report, more_claims=True).run([])
        return report

    # --- what the loop asks ---------------------------------------------------------------------------

    def stop_reason(self) -> str:
        """Why no new row may start now: "budget", or "" to go on (a breaker holds only its own scope's rows)."""
        return "budget" if self.budget_spent else ""

    def window_of(self, alias: str) -> int:
        """How many requests the backend `alias` may have out at once (an unknown alias: the fallback)."""
        return self.windows.get(alias, self.fallback_window)

    def breaker_for(self, row: Row) -> CircuitBreaker:
        """The breaker of the scope `row` goes to: its backend, and the origin when a user chose the destination."""
        if not row.scope:
            backend = self.backends.get(row.message.backend)
            origin = backend.breaker_scope(row.message) if backend is not None else ""
            row.scope = Breakers.scope(row.message.backend, origin)
        return self.breakers.get(row.scope)

    def may_start(self, row: Row) -> str:
        """ "go" (marked as the probe when its scope is half-open), "wait" (its scope's probe is out) or
        "paused" (its scope's breaker is open)."""
        breaker = self.breaker_for(row)
        verdict = breaker.allows(self.clock.monotonic())
        row.probe = verdict == "probe"
        # Its answer is judged in the order rows started, whenever it completes.
        row.ticket = breaker.take_ticket() if verdict == "go" else None
        if verdict:
            return "go"
        return "wait" if breaker.state == HALF_OPEN else "paused"

    def unsendable(self, row: Row) -> Unsendable | None:
        """Whether `row` must end without a send (expired; device inactive), judged at the send's database time."""
        reason = row.claim.inactive.get(row.device_id) or self._dead_devices.get(row.device_id)
        return unsendable(
            expires_at=row.message.expires_at,
            now=row.claim.database_time(self.clock.monotonic()),
            device_active=None if row.device_id is None else reason is None,
            device_reason=reason or "",
        )

    def deferred(self, row: Row) -> tuple[datetime, str] | None:
        """When `row` may go if the quiet-hours policy defers it now (at the send's database time), and why.

        Asked again at the send because the answer may differ from the one at creation (the user's
        settings changed, or a `send_at` falls inside quiet hours). A policy that raises or answers
        nonsense is logged and the row is sent: a site's bug must not park its pushes forever."""
        user = row.claim.users.get(row.device_id) if row.claim.quiet is not None else None
        if user is None:
            return None
        at = row.claim.database_time(self.clock.monotonic())
        try:
            later = quiet_until(row.claim.quiet, user, at, row.message.priority)
        except Exception as exc:  # noqa: BLE001 - site code: a broken policy must not stop delivery
            why = outside_text(f"{type(exc).__name__}: {exc}", limit=300)
            log_event(logger, "quiet_hours_error", job=JOB, id=row.pk, owner=self.owner, reason=why)
            return None
        if later is None:
            return None
        return later, deferral_reason(at, later, when=" when the row was claimed")

    def defer(self, rows: list[tuple[Row, datetime, str]]) -> int:
        """Hand back rows the quiet-hours policy defers, each due when it may go, without using an attempt."""
        by_time: dict[tuple[datetime, str], list[Row]] = {}
        for row, later, reason in rows:
            by_time.setdefault((later, reason), []).append(row)
        return sum(
            self.buffer.release(mine, reason, next_attempt_at=later, last_error=reason)
            for (later, reason), mine in by_time.items()
        )

    def record_answers(self, group: list[tuple[Row, SendResult]]) -> None:
        """Show each answer to its scope's breaker; record an opening (an event, not a leased write)."""
        for row, result in group:
            breaker = self.breaker_for(row)
            if breaker.record(result, self.clock.monotonic(), probe=row.probe, ticket=row.ticket):
                log_event(logger, "breaker_open", job=JOB, id="-", owner=self.owner, reason=breaker.reason)
                self.first_opening = self.first_opening or breaker.reason
                # Kept so the console and the metrics see it after this worker is gone.
                BreakerOpening.objects.create(opened_at=self.clock.now(), owner=self.owner, reason=breaker.reason)

    def release(self, rows: list[Row]) -> int:
        """Hand back rows never sent (the budget is spent), claimable at once, without using an attempt."""
        reason = "execution budget spent before this row was sent; released for the next drain"
        return self.buffer.release(rows, reason)

    def release_for_breaker(self, rows: list[Row]) -> int:
        """Hand back rows whose scope's breaker is open, due when its pause ends, without using an attempt."""
        by_scope: dict[str, list[Row]] = {}
        for row in rows:
            by_scope.setdefault(row.scope, []).append(row)
        released = 0
        now = self.clock.monotonic()
        for scope, mine in by_scope.items():
            breaker = self.breakers.get(scope)
            seconds = breaker.seconds_open(now)
            reason = f"{breaker.reason}. Held back for {seconds:.1f} s without using an attempt."
            until = self.clock.now(timedelta(seconds=seconds))
            released += self.buffer.release(mine, reason, next_attempt_at=until, last_error=reason)
        return released

    def learn(self, done: Finished) -> None:
        self._dead_devices.update(done.dead)


def _completer_needs_own_thread() -> bool:
    """Whether the completer may write on a connection of its own (PostgreSQL, outside any transaction)."""
    return connection.vendor == "postgresql" and not connection.in_atomic_block


class _Pump:
    """One run of the loop: rows waiting to start, rows out, rows being finished."""

    def __init__(self, worker: PushWorker, report: DeliveryReport, *, more_claims: bool) -> None:
        self.worker = worker
        self.report = report
        self.more_claims = more_claims
        self.waiting: deque[Row] = deque()
        self.parked: list[Row] = []  # rows whose half-open scope's probe is out: back in line at the next answer
        # Rows whose backend's window was full, by alias: back in line when that backend answers.
        self.full: dict[str, deque[Row]] = {}
        self.in_flight: dict[Any, Row] = {}
        self.out: dict[str, int] = {}  # requests out per backend alias
        self.finishing = 0  # rows handed to the completer's thread, not yet counted
        self.nothing_due_at: float | None = None  # real time of the last claim that found nothing
        self.recheck = _RECHECK_SECONDS[0]  # how long after it to look again
        self.found_at = time.monotonic()  # real time of the last claim that found rows
        self.stop = ""
        self.thread: CompleterThread | None = None
        self.lingering = worker.lingering if more_claims else Lingering()

    def run(self, rows: list[Row]) -> None:
        worker = self.worker
        self.waiting.extend(rows)
        if _completer_needs_own_thread():
            self.thread = CompleterThread(
                worker.completer, worker.inbox, gather=_GATHER_SECONDS, backlog_gather=_BACKLOG_GATHER_SECONDS
            )
        stop_listening: Callable[[], None] | None = None
        try:
            # Subscribed before the first claim: a row requested after any look of ours is heard, none is lost.
            if self.lingering.task is not None and self.lingering.seconds:
                stop_listening = self.lingering.task.on_arrival(worker.arrived)
            while self.step():
                pass
        finally:
            if stop_listening is not None:
                stop_listening()
            if self.thread is not None:
                self.thread.close()
                for kind, item in worker.inbox.take(0.0):  # the last groups' counts
                    if kind == DONE:
                        self._count(item)
            else:
                worker.completer.flush_touches()
        self.report.breaker = worker.first_opening
        self.report.budget_spent = self.stop == "budget"

    def step(self) -> bool:
        """One turn: keep leases alive, claim, start rows, take answers in. False when the run is over."""
        worker = self.worker
        if not worker.budget_spent:
            worker.buffer.keep_alive()
        self._check_stop()
        if self.more_claims:
            self._refill()
            if self.lingering.task is not None:
                self.lingering.task.turn(self._in_hand() < worker.concurrency)
        self._start()
        if self.in_flight or self.finishing:
            self._take(self._answer_wait())
            return True
        if self.waiting:
            return True
        # Nothing out and nothing waiting: done, unless more rows may be claimed ...
        if not self.more_claims or self.stop:
            return False
        if self.nothing_due_at is None:
            return True
        return self._linger(self.nothing_due_at)

    def _answer_wait(self) -> float:
        """How long to wait for the next answer while requests are out."""
        timeout = max(0.05, min(1.0, self.worker.buffer.seconds_to_renewal()))
        # Look again when the recheck is due, but only if a claim could run then: while the rows in
        # hand fill every window, the next answer (which wakes this wait) is what makes room, and a
        # recheck already due would otherwise turn this wait into a spin.
        if self.more_claims and self.nothing_due_at is not None:
            due_in = max(0.0, self.nothing_due_at + self._recheck() - time.monotonic())
            if due_in < timeout and self._may_claim():
                timeout = due_in
        return timeout

    def _linger(self, nothing_due_at: float) -> bool:
        """With nothing out or waiting: wait a little for rows still to come; False when the drain ends."""
        # The drain lingers a little for rows still to come, looking again when one is requested
        # (or at the next poll): a row created meanwhile goes out on this loop, its sender's open
        # connections and its completer, without waiting for the broker to hand out a new drain. A
        # drain whose breaker opened stops here: its rows are held, the next drain starts afresh.
        if time.monotonic() - self.found_at >= self.lingering.seconds or self.worker.first_opening:
            return False
        self._take(max(0.0, nothing_due_at + self.recheck - time.monotonic()))
        return True

    def _check_stop(self) -> bool:
        self.stop = self.stop or self.worker.stop_reason()
        if self.stop and (self.waiting or self.parked or self.full):
            self.report.released += self.worker.release([*self.waiting, *self.parked, *self._waiting_for_window()])
            self.waiting.clear()
            self.parked.clear()
            self.full.clear()
        return bool(self.stop)

    def _waiting_for_window(self) -> list[Row]:
        return [row for rows in self.full.values() for row in rows]

    def _rounds_left(self) -> bool:
        """Whether every backend with rows waiting has no more than its window in hand (out and waiting)."""
        if not (self.waiting or self.full):
            return True
        unstarted = {alias: len(rows) for alias, rows in self.full.items()}
        for row in self.waiting:
            alias = row.message.backend
            unstarted[alias] = unstarted.get(alias, 0) + 1
        window_of, out = self.worker.window_of, self.out
        return all(out.get(alias, 0) + n <= window_of(alias) for alias, n in unstarted.items())

    def _in_hand(self) -> int:
        """Rows claimed and not yet answered: waiting to start (for a slot or a window) or out."""
        return len(self.waiting) + len(self.in_flight) + sum(len(rows) for rows in self.full.values())

    def _refill(self) -> None:
        """Claim more while no backend has more than one round of its window in hand, so a slot never
        waits on a claim, and a busy backend's rows are not kept leased here beyond what it can take
        (other workers may send them meanwhile)."""
        worker = self.worker
        while (
            self.nothing_due_at is None or time.monotonic() - self.nothing_due_at >= self._recheck()
        ) and self._may_claim():
            idle = not (self.waiting or self.in_flight or self.finishing)
            _, rows = worker.buffer.claim(worker.batch_size)
            if not rows:
                if self.nothing_due_at is not None and not self.in_flight:
                    # Slow down only when nothing is out either: traffic is ebbing.
                    self.recheck = min(self.lingering.poll, self.recheck * 2)
                self.nothing_due_at = time.monotonic()
                return
            if idle and self.report.batches and self.lingering.task is not None:
                workers.tell_watchers()  # leased again after an idle spell (the first claim: the task said so)
            self.report.batches += 1
            self.report.claimed += len(rows)
            self.recheck = _RECHECK_SECONDS[0]
            self.found_at = time.monotonic()
            self.waiting.extend(rows)
            # Fewer than asked: nothing else was due and free when the claim ran, so the next look waits
            # its recheck (or an arrival) instead of costing a statement that finds nothing.
            self.nothing_due_at = self.found_at if len(rows) < worker.batch_size else None
            if self.nothing_due_at is not None:
                return
            if self.lingering.task is not None:
                self.lingering.task.backlog()

    def _may_claim(self) -> bool:
        """Whether a claim may run now, timing aside: not stopping, and no backend with more than a round in hand.
        The look at every waiting row's backend goes last: most turns stop at the cheaper tests."""
        return not self.stop and self._in_hand() <= self.worker.concurrency and self._rounds_left()

    def _recheck(self) -> float:
        """How long after a claim that found nothing (or less than asked) to look again."""
        task = self.lingering.task
        if self.in_flight and task is not None and task.hears():
            # Busy, and every new row's request reaches this loop as an arrival, which looks at once.
            return self.lingering.poll
        return self.recheck

    def _start(self) -> None:
        """Hand rows to the sender while a slot is free, each after the budget, breaker and lease checks."""
        worker = self.worker
        turn = _Turn()
        while self.waiting and len(self.in_flight) < worker.concurrency:
            alias = self.waiting[0].message.backend
            if self.out.get(alias, 0) >= worker.window_of(alias):
                # Its backend's window is full: it waits for that backend's next answer, while rows for
                # other backends go on starting. It is judged (lease, expiry, device, quiet hours,
                # breaker) only once a slot is free: every answer brings a backend's waiting rows back to
                # the front, and judging each again at every answer would repeat that work for nothing.
                self.full.setdefault(alias, deque()).append(self.waiting.popleft())
                continue
            if self._check_stop():
                break
            if not worker.budget_spent:
                worker.buffer.keep_alive()
            row = self.waiting.popleft()
            if self._judged_unsendable(row, turn):
                continue
            if worker.hooks.before_send:
                worker.hooks.before_send(row.pk)
            row.sent_at = row.claim.database_time(worker.clock.monotonic())
            self.in_flight[row.pk] = row
            self.out[alias] = self.out.get(alias, 0) + 1
            turn.starting.append((row.pk, row.message))
            self.report.sent += 1
        self._settle(turn)
        worker.sender.submit(turn.starting)

    def _judged_unsendable(self, row: Row, turn: "_Turn") -> bool:
        """Whether `row` must not be sent now (kept in `turn` or parked, with why); False: send it."""
        worker = self.worker
        if row.pk not in row.claim.batch:
            # Our renewal was refused for this row (someone else holds it): it must not be sent.
            self.report.skipped += 1
            row.claim.settle("skipped")
            log_lost(row.pk, row.owner, "skipped before sending: the lease renewal was refused for this row")
            return True
        if ending := worker.unsendable(row):
            row.sent_at = row.claim.database_time(worker.clock.monotonic())
            turn.unsent.append((row, ending))  # expired, or its device is inactive: ends without a send
            return True
        if (deferral := worker.deferred(row)) is not None:
            turn.quiet.append((row, *deferral))  # inside its user's quiet hours: back, due when they end
            return True
        verdict = worker.may_start(row)
        if verdict == "paused":
            turn.breaker_open.append(row)  # its scope's breaker is open: back, due when the pause ends
            return True
        if verdict == "wait":
            self.parked.append(row)  # kept (and kept alive) until the probe's answer decides
            return True
        return False

    def _settle(self, turn: "_Turn") -> None:
        """End, hold back or defer the rows this turn judged unsendable, a statement per kind."""
        worker = self.worker
        if turn.unsent:
            for row, _ in turn.unsent:
                row.claim.batch.drop(row.pk)
            count_unsent(turn.unsent, worker.completer.end_unsent(turn.unsent), self.report)
        if turn.breaker_open:
            landed = worker.release_for_breaker(turn.breaker_open)
            self.report.released += landed
            self.report.held += landed
        if turn.quiet:
            landed = worker.defer(turn.quiet)
            self.report.released += landed
            self.report.deferred += landed

    def _take(self, timeout: float) -> None:
        """Wait up to `timeout` for answers or finished groups, and act on everything that came in."""
        answers: list[tuple[Row, SendResult]] = []
        for kind, item in self.worker.inbox.take(timeout):
            if kind == ANSWER:
                key, result = item
                row = self.in_flight.pop(key)
                self.out[row.message.backend] -= 1
                answers.append((row, result))
            elif kind == DONE:
                self._count(item)
            elif kind == FAILED_WITH:
                raise item
            elif kind == ARRIVED:
                # New rows were requested: look at the next turn, not at the next poll.
                self.nothing_due_at = None
                self.recheck = _RECHECK_SECONDS[0]
        if answers:
            self._finish(answers)
            # The probe may have answered: parked rows go back to the front of the line, and so do the
            # rows of every backend that answered (a slot of its window is free again).
            for alias in {row.message.backend for row, _ in answers}:
                if rows := self.full.pop(alias, None):
                    self.waiting.extendleft(reversed(rows))
            self.waiting.extendleft(reversed(self.parked))
            self.parked.clear()

    def _finish(self, group: list[tuple[Row, SendResult]]) -> None:
        worker = self.worker
        worker.record_answers(group)
        for row, _ in group:
            # Finished from here on: no renewal covers it (its finish is judged by the lease it had).
            row.claim.batch.drop(row.pk)
        if self.thread is None:
            self._count(worker.completer.finish(group), threaded=False)
            return
        self.finishing += len(group)
        self.thread.submit(group, more=bool(self.in_flight), backlog=bool(self.waiting or self.full))

    def _count(self, done: Finished, *, threaded: bool = True) -> None:
        if threaded:
            self.finishing -= len(done.plans)
        self.worker.learn(done)
        count(done, self.report)
        self.worker.buffer.forget_done()


class WorkerOptions(TypedDict, total=False):
    """The `PushWorker` keywords `deliver_batch` and `drain` pass on (unset or None: the WEAVE setting)."""

    clock: Clock
    owner: str | None
    hooks: Hooks | None
    batch_size: int | None
    concurrency: int | None
    budget: float | None
    ttl: float | None
    rng: random.Random | None
    backends: Mapping[str, PushBackend] | None
    linger: float | Lingering


def deliver_batch(**options: Unpack[WorkerOptions]) -> DeliveryReport:
    """Claim one batch and deliver it."""
    worker = PushWorker(**options)
    try:
        return worker.deliver(worker.claim())
    finally:
        worker.close()


def drain(*, enqueue_more: bool = True, **options: Unpack[WorkerOptions]) -> DeliveryReport:
    """Deliver due notifications until none are left or the budget is spent; then re-enqueue if rows remain."""
    worker = PushWorker(**options)
    try:
        report = worker.run()
    finally:
        worker.close()
    if report.budget_spent and enqueue_more and Notification.objects.claimable(worker.clock).exists():
        queue.enqueue_drain()
        report.more_enqueued = True
    log_event(
        logger,
        "drain",
        job=JOB,
        id="-",
        owner=report.owner,
        delivered=report.delivered,
        retried=report.temporary + report.unknown,
        failed=report.failed,
        expired=report.expired,
        pruned=report.pruned,
        lease_lost=report.lease_lost,
        skipped=report.skipped,
        released=report.released,
        reason=report.breaker,
    )
    return report


@dataclass
class _Turn:
    """What one turn of `_start` decided for the rows it judged: sent, ended unsent, held back, deferred."""

    starting: list[tuple[Any, PushMessage]] = field(default_factory=list)
    unsent: list[tuple[Row, Unsendable]] = field(default_factory=list)
    breaker_open: list[Row] = field(default_factory=list)
    quiet: list[tuple[Row, datetime, str]] = field(default_factory=list)

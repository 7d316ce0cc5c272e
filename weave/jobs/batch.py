"""The engine's batch mode: claim many due jobs in one statement, run each, finish them in groups.

    run_batches("invoice", Invoice.objects.due().order_by("next_attempt_at", "pk"))

One drain of a job type loops:

1. **claim**: one `UPDATE ... RETURNING` takes up to `limit` due rows (`FOR UPDATE SKIP LOCKED` on
   PostgreSQL: two drains never share or wait for a row) and reads them back; each row gets its own
   fence and its attempt counted, as a single claim does;
2. **run**: each row's handler (or steps) in the queryset's order, each under its own `JobContext`,
   so guarded writes, heartbeats and idempotency keys work as in a single attempt. A
   `BatchHeartbeat` renews every row not yet written every ttl/3; a row it finds lost is not started;
3. **finish**: the finished rows are written together, at least every `flush_rows` rows or
   `flush_seconds`: one `release_each_returning` statement (each row under its own guard, returning
   the due time it stored, which a retry's record carries) and one INSERT of their attempt records,
   in one transaction. A row the guard refuses was taken over: it is recorded as `blocked`, naming
   who holds it now, and nothing of it is written.

Cut off from the database, a drain writes no finish it was holding: each attempt it still had open
is ended from what it reads back on a fresh connection, and its row is given back if still ours.

A row that runs long does not hold back the finished rows before it: the heartbeat's thread writes
them once the row has run for `flush_seconds`. Nor the rows after it: once it has run for
`HAND_ON_AFTER`, the heartbeat's thread gives back the batch's rows not yet started (their claim
undone, as at the end of the budget) and asks for another drain, so an idle worker runs them.

A give-back is one guarded release of the rows (each under its own lease) and one INSERT of a
`released` record of each (no attempt: the claim took a fence, and the job's story says whose and
why), in one transaction; a row taken over meanwhile is left to its holder and recorded `blocked`.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, router, transaction

from weave import wake
from weave.jobs.context import JobContext
from weave.jobs.declaration import JobType, get
from weave.jobs.records import JobAttempts, released_row
from weave.jobs.runner import Ending, end_lost, log_ending, settle_job_cut_off, work
from weave.jobs.takeover import own_account, record_takeover
from weave.jobs.undo import hand_on
from weave.leases import Clock, Lease, default_clock, insert_receipts, new_owner
from weave.leases.batch_heartbeat import BatchHeartbeat
from weave.leases.receipts import insert_receipts_returning
from weave.models import JobAttempt
from weave.worker_db import is_cut_off

logger = logging.getLogger("weave.jobs")

BATCH_SIZE = 100  # rows one claim takes at most
FLUSH_SECONDS = 0.2  # finished rows wait at most this long to be written (longer only behind a failing write)
HAND_ON_AFTER = 1.0  # a row running this long hands the batch's rows not yet started to another drain

# Why a claimed row was given back unstarted: the reason of its `released` record.
BUDGET_ENDED = "Given back unstarted at the end of the drain's budget; not counted as an attempt."
HANDED_ON = (
    "Handed on to another drain: a row in the same batch ran long. Given back unstarted; not counted as an attempt."
)


@dataclass
class Finished:
    """One attempt whose work ended, waiting for its finish to be written."""

    ctx: JobContext
    started: Any
    ending: Ending
    record: dict[str, Any] | None = None  # its attempt record as stored (with the database's finish time)


@dataclass
class Report:
    """What a drain did: how each attempt ended, and how many claims it made."""

    outcomes: dict[str, int] = field(default_factory=dict)
    claims: int = 0
    more: bool = False  # work may be left: the last claim took a whole batch, or the budget ended first

    def count(self, outcome: str, n: int = 1) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + n


class Completer:
    """Write finished attempts in groups: one guarded release of all their rows, one INSERT of their records.

    Used by the drain's thread and, while a row runs long, by the heartbeat's thread: one write at a
    time. `task_finished`-style hooks (`JobType.finished`) run on the drain's thread, after the write.
    """

    def __init__(self, jt: JobType, clock: Clock, heartbeat: BatchHeartbeat, report: Report) -> None:
        self.jt = jt
        self.clock = clock
        self.heartbeat = heartbeat
        self.report = report
        self.rows: Any = jt.model._default_manager
        self._pending: list[Finished] = []
        self._oldest = 0.0
        self._landed: list[Finished] = []  # written, their hooks not yet told
        self._refused = 0  # refused by their guard since the last `tell()`
        self._handed_on = 0  # of those, given back for an undo asked meanwhile (recorded "cancelled")
        self._lock = threading.Lock()
        self._writing = threading.Lock()

    def add(self, item: Finished) -> None:
        with self._lock:
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.append(item)

    def due(self, rows: int, seconds: float) -> bool:
        with self._lock:
            return bool(self._pending) and (len(self._pending) >= rows or time.monotonic() - self._oldest >= seconds)

    def flush(self) -> None:
        """Write every finished attempt waiting (on the calling thread's connection)."""
        with self._writing:
            with self._lock:
                items, self._pending = self._pending, []
            if not items:
                return
            # Not renewed from here on: the write comes now, and a renewal would wait on its row locks.
            self.heartbeat.forget(item.ctx.lease.pk for item in items)
            try:
                landed = self._write(items)
            except BaseException:
                # Nothing was written (one transaction): keep them for the next write, still renewed.
                self.heartbeat.keep(item.ctx.lease for item in items)
                with self._lock:
                    self._pending[:0] = items
                raise
            with self._lock:
                self._landed.extend(item for item in items if item.ctx.lease.pk in landed)

    def waiting(self) -> set[Any]:
        """The pks of the finished attempts not yet written."""
        with self._lock:
            return {item.ctx.lease.pk for item in self._pending}

    def drop(self) -> list[Finished]:
        """Take the finished attempts waiting to be written, so that none is written (a cut-off drain)."""
        with self._lock:
            items, self._pending = self._pending, []
        return items

    def count_refused(self, n: int) -> None:
        """Count `n` attempts whose rows were taken over before they started (told as blocked by `tell()`)."""
        with self._lock:
            self._refused += n

    def landed_anyway(self, item: Finished) -> None:
        """`item`'s finish landed though its write raised (the COMMIT's reply was lost): tell it as written."""
        with self._lock:
            self._landed.append(item)

    def tell(self) -> None:
        """Run the type's `finished` hook for the attempts written so far (on the drain's thread)."""
        with self._lock:
            landed, self._landed = self._landed, []
            refused, self._refused = self._refused, 0
            handed_on, self._handed_on = self._handed_on, 0
        if refused:
            self.report.count("blocked", refused)
        if handed_on:
            self.report.count(str(JobAttempt.Outcome.CANCELLED), handed_on)
        for item in landed:
            self.report.count(item.ending.outcome)
            log_ending(item.ctx, item.ending)
        told = [item for item in landed if not item.ending.undo]  # an undo's steps did not run: nothing to tell
        if told and self.jt.finished_many is not None:
            self.jt.finished_many([(item.ctx, item.ending.outcome, item.record) for item in told])
        elif self.jt.finished is not None:
            for item in told:
                self.jt.finished(item.ctx, item.ending.outcome)

    def _write(self, items: list[Finished]) -> set[Any]:
        with transaction.atomic(using=router.db_for_write(self.jt.model)):
            landed: dict[Any, dict[str, Any]] = {}
            # Each finish expects its attempt's state (pending, or undoing): one statement per state. It returns
            # the due times as it stored them: a retry's record carries its row's, not a second reading.
            for guard, group in _by_guard(items).items():
                rows = [(item.ctx.lease, item.ending.fields) for item in group]
                landed |= self.rows.release_each_returning(
                    rows, ["next_attempt_at"], clock=self.clock, expect=dict(guard)
                )
            done = [item for item in items if item.ctx.lease.pk in landed]
            receipts = [
                item.ending.receipt(item.ctx, item.started, due=landed[item.ctx.lease.pk]["next_attempt_at"])
                for item in done
            ]
            refused = [item for item in items if item.ctx.lease.pk not in landed]
            # Refused because our own finish is there: an earlier write of it landed with its COMMIT's reply lost.
            earlier, refused = _landed_earlier(self.jt, refused)
            # A row refused only because its undo was asked meanwhile is given back for it (recorded "cancelled").
            lost = [item for item in refused if not hand_on(item.ctx, item.started, "at the finish")]
            handed_on, refused = len(refused) - len(lost), lost
            receipts += blocked_receipts(self.jt, self.rows, refused, clock=self.clock, where="at the finish")
            stored = insert_receipts_returning(JobAttempt, receipts, ["job_id", "fence", "finished_at"])
            finished_at = {(row["job_id"], row["fence"]): row["finished_at"] for row in stored}
            for item, receipt in zip(done, receipts, strict=False):
                item.record = {**receipt, "finished_at": finished_at[(receipt["job_id"], receipt["fence"])]}
        with self._lock:
            self._handed_on += handed_on
        if refused:
            with self._lock:
                self._refused += len(refused)
            logger.warning("event=lease_lost job_type=%s rows=%s where=finish", self.jt.name, len(refused))
        return set(landed) | earlier


def _landed_earlier(jt: JobType, items: list[Finished]) -> tuple[set[Any], list[Finished]]:
    """The pks of `items` whose own finish is on record (their attempt's record, with the ending they
    hold, under their owner and fence: only that attempt's finish writes it, a takeover records
    `blocked`), and the items left."""
    if not items:
        return set(), items
    recorded = set(
        JobAttempt.objects.filter(job_type=jt.name, job_id__in=[str(item.ctx.lease.pk) for item in items]).values_list(
            "job_id", "owner", "fence", "outcome"
        )
    )
    earlier = {
        item.ctx.lease.pk
        for item in items
        if (str(item.ctx.lease.pk), item.ctx.lease.owner, item.ctx.lease.fence, str(item.ending.outcome)) in recorded
    }
    return earlier, [item for item in items if item.ctx.lease.pk not in earlier]


def _by_guard(items: Sequence[Finished]) -> dict[tuple[tuple[str, Any], ...], list[Finished]]:
    groups: dict[tuple[tuple[str, Any], ...], list[Finished]] = {}
    for item in items:
        groups.setdefault(tuple(sorted(item.ctx.guard.items())), []).append(item)
    return groups


def blocked_receipts(
    jt: JobType, rows: Any, items: Sequence[Finished], *, clock: Clock, where: str
) -> list[dict[str, Any]]:
    """The `blocked` records of attempts whose rows were taken over: each names who holds its row now.

    An attempt the taking-over worker already recorded (a task's takeover does) is not recorded twice.
    """
    if not items:
        return []
    recorded = set(
        JobAttempt.objects.filter(job_type=jt.name, job_id__in=[str(item.ctx.lease.pk) for item in items]).values_list(
            "job_id", "number", "fence"
        )
    )
    receipts = []
    for item in items:
        ctx = item.ctx
        lost = rows.refusal(ctx.lease, clock=clock)
        if (str(ctx.lease.pk), ctx.attempt, ctx.lease.fence) in recorded:
            own_account(ctx, ctx.blocked_reason(lost, where))  # if the takeover guessed its worker had died
            continue
        blocked = Ending(JobAttempt.Outcome.BLOCKED, reason=ctx.blocked_reason(lost, where))
        receipts.append(blocked.receipt(ctx, item.started))
    return receipts


def order_key(order_by: Sequence[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]] | None:
    """A sort key putting claimed rows back in the queryset's order (`RETURNING` keeps none); None if unknown."""
    if not order_by or not all(isinstance(name, str) for name in order_by):
        return None
    names = [(name.lstrip("-"), name.startswith("-")) for name in order_by]

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        parts: list[Any] = []
        for name, descending in names:
            value = row[name if name != "id" else "pk"] if name in row or name == "id" else None
            parts.append(_Desc(value) if descending else _Asc(value))
        return tuple(parts)

    return key


class _Asc:
    """Ascending, nulls last (PostgreSQL's default)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: "_Asc") -> bool:
        if self.value is None or other.value is None:
            return self.value is not None and other.value is None
        return bool(self.value < other.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Asc) and self.value == other.value


class _Desc(_Asc):
    """Descending, nulls first (PostgreSQL's default)."""

    def __lt__(self, other: "_Asc") -> bool:
        if self.value is None or other.value is None:
            return self.value is None and other.value is not None
        return bool(self.value > other.value)


class BatchDrain:
    """One drain of job type `jt` over the due rows `rows`, batch by batch, until none is due or the budget ends."""

    def __init__(
        self,
        job_type: str,
        rows: Any,
        *,
        owner: str | None = None,
        clock: Clock = default_clock,
        limit: int = BATCH_SIZE,
        flush_rows: int = BATCH_SIZE,
        flush_seconds: float = FLUSH_SECONDS,
        on_full: Callable[[], object] | None = None,
    ) -> None:
        self.jt = get(job_type)
        self.rows = rows
        self.owner = owner or new_owner(f"{job_type}:")
        self.clock = clock
        self.limit = limit
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.on_full = on_full  # asked once, when a claim takes a whole batch (e.g. for a second drain)
        self.report = Report()
        model: Any = self.jt.model
        self.model = model
        self.ttl = self.jt.lease_ttl()
        concrete = model._meta.concrete_fields
        self.names = [f.name for f in concrete]
        self.attnames = [f.attname for f in concrete]
        self.alias = router.db_for_write(model)
        self.order = order_key(list(rows.query.order_by))
        also = self.jt.claim_writes(clock)
        self.statement = rows.claim_statement(
            owner=self.owner, ttl=self.ttl, limit=limit, fields=self.names, clock=clock, also=also
        )
        # After a hand-on this drain claims one row at a time: its rows run long, so a batch would only be
        # handed on again (one release per row), and other drains take the rest. Compiled when first needed.
        self.one_at_a_time: Callable[[], Any] = lambda: rows.claim_statement(
            owner=self.owner, ttl=self.ttl, limit=1, fields=self.names, clock=clock, also=also
        )
        self.handed_on = False
        self.single: Any = None
        # On a fake clock time moves only when a test moves it: the test renews (`heartbeat.tick()`).
        self.heartbeat = BatchHeartbeat(
            model._default_manager,
            owner=self.owner,
            ttl=self.ttl,
            clock=clock,
            background=clock.constant_sql,
            poll=flush_seconds,
            while_running=self._while_running,
        )
        self.completer = Completer(self.jt, clock, self.heartbeat, self.report)
        # Every row claimed and not given back, by pk: whose attempts a cut-off drain ends from what it reads.
        self._open: dict[Any, JobContext] = {}
        # The batch's rows not started yet: the drain's thread takes the next one from here, and the heartbeat's
        # thread may take them all to hand them on (`_hand_on`); the lock makes a row one or the other's.
        self._queue: list[JobContext] = []
        self._queue_lock = threading.Lock()

    def run(self, budget: float) -> Report:
        """Claim and run batches until a claim finds fewer rows than it may take, or `budget` seconds pass.

        Cut off from the database, the drain stops and ends each attempt it still had open from what it
        reads back on a fresh connection (`weave.jobs.cutoff`): no finish waiting to be written is written.
        """
        try:
            return self._drain(budget)
        except DatabaseError as cut:
            if not is_cut_off(cut):
                raise
            self._settle_cut_off(cut)
            return self.report

    def _settle_cut_off(self, cut: DatabaseError) -> None:
        waiting = {item.ctx.lease.pk: item for item in self.completer.drop()}
        for ctx in self._open.values():
            item = waiting.get(ctx.lease.pk)
            if item is not None:
                where = "at the finish"
            else:
                where = f"at step {ctx.step}" if ctx.step else "before it started"
            started = ctx.claimed_at or self.clock.read()
            outcome = settle_job_cut_off(ctx, started, cut, where)
            if outcome is not None:
                self.report.count(outcome)
                continue
            # Its ending was on record already: most often our group finish, which landed with its reply lost.
            ended = JobAttempts(ctx, started).ended()
            if item is not None and ended == item.ending.outcome:
                self.completer.landed_anyway(item)  # counted and told like every finish that landed
            elif ended is not None and ended != JobAttempt.Outcome.RELEASED:  # a give-back is no attempt's ending
                self.report.count(ended)
        self._open.clear()
        self.completer.tell()  # the attempts whose finish landed before the cut (or with its reply lost)

    def _drain(self, budget: float) -> Report:
        with self.heartbeat:
            try:
                self._batches(self.clock.monotonic() + budget)
            except BaseException as error:
                # Cut off, nothing waiting is written: `run()` reads back and ends every open attempt.
                if not (isinstance(error, DatabaseError) and is_cut_off(error)):
                    self._write_waiting()
                raise
            self._write_waiting()
        return self.report

    def _batches(self, ends: float) -> None:
        asked = False
        while self.clock.monotonic() < ends:
            claimed = self._claim()
            self.report.more = len(claimed) >= (1 if self.handed_on else self.limit)
            if self.report.more:
                # A backlog: this drain takes every due row, so this process's watcher need not look.
                wake.pause_watch(self.jt.registry_key, wake.POLL_MAX)
            if self.report.more and not asked and self.on_full is not None:
                self.on_full()
                asked = True
            self._run_rows(claimed, ends)
            if not self.report.more:
                break

    def _write_waiting(self) -> None:
        self.completer.flush()
        self.completer.tell()

    def _claim(self) -> list[JobContext]:
        # The rows of earlier batches are written by now, or still waiting in the completer.
        waiting = self.completer.waiting()
        with self._queue_lock:  # a hand-on on the heartbeat's thread may still be giving rows back
            self._open = {pk: ctx for pk, ctx in self._open.items() if pk in waiting}
        if self.handed_on and self.single is None:
            self.single = self.one_at_a_time()
        batch, found = (self.single if self.single is not None else self.statement).run()
        self.report.claims += 1
        if not found:
            return []
        self.heartbeat.add(batch)
        if self.order is not None:
            found.sort(key=self.order)
        contexts = []
        for row in found:
            pk = row["pk"]
            job = self.model.from_db(self.alias, self.attnames, [row[name] for name in self.names])
            lease = Lease(pk=pk, owner=self.owner, fence=batch.fences[pk], expires_at=batch.expires_at)
            ctx = JobContext(self.jt.name, job, lease, 0, 0, self.ttl, self.clock)
            ctx.job_model = self.model
            ctx.batch = self.heartbeat
            ctx.attempt = job.attempts  # as counted by the claim (the work reads it again)
            contexts.append(ctx)
            with self._queue_lock:
                self._open[pk] = ctx
        return contexts

    def _run_rows(self, contexts: list[JobContext], ends: float) -> None:
        with self._queue_lock:
            self._queue = list(contexts)
        while True:
            with self._queue_lock:
                if not self._queue:
                    return
                spent = self.clock.monotonic() >= ends
                taken = self._queue if spent else self._queue[:1]
                self._queue = [] if spent else self._queue[1:]
            if spent:
                for kept in self._give_back(taken, BUDGET_ENDED):
                    self._run_one(kept)  # a row the type will not have given back (e.g. a takeover to record)
                self.report.more = True
                return
            self._run_one(taken[0])
            self.completer.tell()
            if self.completer.due(self.flush_rows, self.flush_seconds):
                self.completer.flush()
                self.completer.tell()

    def _run_one(self, ctx: JobContext) -> None:
        started = ctx.claimed_at or ctx.clock.read()
        pk = ctx.lease.pk
        self.heartbeat.ensure_live()
        if not self.heartbeat.renews(pk):
            # A renewal found it taken over before it started: nothing ran, nothing of it is written.
            ctx.attempt = ctx.job.attempts
            rows = self.model._default_manager
            waiting = [Finished(ctx, started, Ending(JobAttempt.Outcome.BLOCKED))]
            insert_receipts(
                JobAttempt, blocked_receipts(self.jt, rows, waiting, clock=self.clock, where="before it started")
            )
            self.report.count("blocked")
            return
        if self.jt.budget is not None:
            ctx.budget_ends = self.clock.monotonic() + self.jt.budget  # an attempt's budget runs from its start
        self.heartbeat.start(ctx.lease, budget=self.jt.budget)
        try:
            ending = work(self.jt, ctx)
        finally:
            self.heartbeat.stop_running()
        if ending.cut is not None:
            raise ending.cut  # the drain stops: `run()` ends every attempt it still has open
        if ending.lost is not None:
            self.heartbeat.forget([pk])
            self.report.count(end_lost(ctx, started, ending.lost))
            return
        self.completer.add(Finished(ctx, started, ending))

    def _give_back(self, contexts: list[JobContext], why: str) -> list[JobContext]:
        """Release the rows not started, their claim undone (the attempt it counted too), each recorded as
        `released` for `why`; return the rows the type will not have given back (`unclaim_fields` says None),
        which stay claimed."""
        kept, given = [], []
        for ctx in contexts:
            undo = {} if self.jt.unclaim_fields is None else self.jt.unclaim_fields(ctx.job)
            if undo is None:
                kept.append(ctx)
                continue
            if not self.jt.records_takeovers:
                record_takeover(ctx)  # the next claim finds the row free: only this one knows whom it replaced
            given.append((ctx, undo))
        if given:
            self._release_unstarted(given, why)
        return kept

    def _release_unstarted(self, given: list[tuple[JobContext, Mapping[str, Any]]], why: str) -> None:
        """One guarded release of every row in `given` and one INSERT of their records, in one transaction.

        A row still ours is recorded `released` (its claim's fence and owner, from the claim's time to now,
        by the database clock); a row the guard refuses was taken over before it started: its attempt did
        count, and is recorded `blocked`, naming who holds the row now, as a row found lost at its start is.
        """
        leases = [ctx.lease for ctx, _ in given]
        # Not renewed from here on: the release comes now, and a renewal would wait on its row locks.
        self.heartbeat.forget(lease.pk for lease in leases)
        rows = self.model._default_manager
        # The counter as the claim left it, less the attempt it counted: the guard keeps any other writer out.
        released = [(ctx.lease, {"attempts": ctx.job.attempts - 1, **undo}) for ctx, undo in given]
        try:
            with transaction.atomic(using=self.alias):
                landed = rows.release_each(released, clock=self.clock)
                records = [released_row(ctx, why) for ctx, _ in given if ctx.lease.pk in landed]
                lost = [
                    Finished(ctx, ctx.claimed_at or self.clock.read(), Ending(JobAttempt.Outcome.BLOCKED))
                    for ctx, _ in given
                    if ctx.lease.pk not in landed
                ]
                where = "as it was given back unstarted"
                records += blocked_receipts(self.jt, rows, lost, clock=self.clock, where=where)
                insert_receipts(JobAttempt, records)
        except BaseException:
            self.heartbeat.keep(leases)  # nothing was written: still ours, still renewed
            raise
        with self._queue_lock:
            for lease in leases:
                self._open.pop(lease.pk, None)
        if lost:
            self.completer.count_refused(len(lost))
            logger.warning("event=lease_lost job_type=%s rows=%s where=give_back", self.jt.name, len(lost))

    def _while_running(self, seconds: float) -> None:
        # On the heartbeat's thread: a row has run a while; write the rows finished before it.
        if seconds >= self.flush_seconds and self.completer.due(1, 0.0):
            try:
                self.completer.flush()
            except Exception:  # noqa: BLE001  (the drain's own thread writes them at the next flush)
                logger.exception("event=batch_flush_failed job_type=%s", self.jt.name)
        if seconds >= HAND_ON_AFTER:
            try:
                self._hand_on()
            except Exception:  # noqa: BLE001  (rows not handed on stay in the queue: this drain runs them)
                logger.exception("event=batch_hand_on_failed job_type=%s", self.jt.name)

    def _hand_on(self) -> None:
        """A row runs long: give back the batch's rows not started yet and ask for another drain to run them,
        so they wait for a free worker rather than for this row (one idle worker is enough)."""
        if self.on_full is None:
            return
        unclaim = self.jt.unclaim_fields
        with self._queue_lock:
            # A row the type would not give back (a takeover to record) stays in the queue, for this drain to run.
            waiting = [ctx for ctx in self._queue if unclaim is None or unclaim(ctx.job) is not None]
            self._queue = [ctx for ctx in self._queue if ctx not in waiting]
        if not waiting:
            return
        try:
            self._give_back(waiting, HANDED_ON)
        except BaseException:
            with self._queue_lock:  # the rows not given back yet stay this drain's to run
                self._queue = [ctx for ctx in waiting if ctx.lease.pk in self._open] + self._queue
            raise
        self.handed_on = True
        self.on_full()
        logger.info("event=batch_handed_on job_type=%s rows=%s owner=%s", self.jt.name, len(waiting), self.owner)


def run_batches(job_type: str, rows: Any, *, budget: float, **options: Any) -> Report:
    """Run one drain of `job_type` over the due rows `rows` (see `BatchDrain`); return its report."""
    return BatchDrain(job_type, rows, **options).run(budget)

"""Run one attempt at one job of a core-run job type: claim → steps (resuming from receipts) → guarded finish.

Every write goes through the lease: the claim by the database clock, each step's receipt (and the
step's own writes) in a guarded transaction, the finish as a guarded release. A lost lease anywhere
ends the attempt as `blocked` with the reason and writes nothing else; it is never `failed`.

Cut off from the database mid-attempt, the attempt reads back what landed on a fresh connection and
records its own ending only (`weave.jobs.cutoff`, into its `JobAttempt` records: `weave.jobs.records`);
"cut off" means its claim never landed.
"""

import json
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, router, transaction

from weave.conf import secret_values
from weave.jobs.context import JobContext, claim, claim_next
from weave.jobs.cutoff import CUT_OFF, landed_claim, record_blocked, settle_cut_off
from weave.jobs.declaration import JobType, get
from weave.jobs.policy import AttemptUnfinished
from weave.jobs.records import JobAttempts, attempt_row
from weave.jobs.steps import Step, UndoWalk, check_steps, saved_result
from weave.jobs.takeover import record_takeover, took_over
from weave.jobs.undo import RUNNING, hand_on, names, undo_saved, undo_tries
from weave.leases import Clock, LeaseBusy, LeaseLost, NotClaimable, default_clock, insert_receipts, new_owner
from weave.models import RUNNABLE_STATES, JobAttempt, JobState, JobStepReceipt
from weave.sanitize import multiline_text, outside_text, redact
from weave.worker_db import is_cut_off

logger = logging.getLogger("weave.jobs")


class BudgetSpent(Exception):  # noqa: N818  (an outcome, not an error: the job resumes later)
    """The attempt's time budget ran out between steps; the job is released to resume at the next step."""


def run_job(job_type: str, pk: Any, *, owner: str | None = None, clock: Clock = default_clock) -> str:
    """Run one attempt at job `pk`; return how it ended: done, retry, failed, blocked, busy or not due."""
    jt = get(job_type)
    model: Any = jt.model
    ttl = jt.lease_ttl()
    owner = owner or new_owner(f"{job_type}:")
    # By pk, either state's due rows: one row's claim is an index lookup whatever the filter.
    rows = model.objects.due(clock) | model.objects.undo_due(clock)
    try:
        # The claim counts the attempt in the same statement: a crash mid-attempt still uses one up.
        ctx = claim(
            job_type, rows, pk, owner=owner, ttl=ttl, clock=clock, budget=jt.budget, also=jt.claim_writes(clock)
        )
    except LeaseBusy:
        return "busy"
    except NotClaimable:
        return "not due"
    except DatabaseError as cut:
        if not is_cut_off(cut):
            raise
        return _claim_cut_off(jt, rows, pk, owner, clock, cut)
    return _attempt(jt, ctx, read_job=True)


def run_next(job_type: str, rows: Any, *, owner: str | None = None, clock: Clock = default_clock) -> str | None:
    """Claim the first due job of `rows` (a due queryset of the type's model, in its order) and run one attempt.

    Return how it ended, as `run_job` does, or None when no job of `rows` was left to claim. The
    claim picks the row and reads it back in its one statement, where `run_job` needs a pk first.
    """
    jt = get(job_type)
    owner = owner or new_owner(f"{job_type}:")
    also = jt.claim_writes(clock)
    try:
        ctx = claim_next(job_type, rows, owner=owner, ttl=jt.lease_ttl(), clock=clock, budget=jt.budget, also=also)
    except DatabaseError as cut:
        if not is_cut_off(cut):
            raise
        # The claim picks its row in the statement: a landed claim is found by its owner alone.
        return _claim_cut_off(jt, rows, None, owner, clock, cut)
    return None if ctx is None else _attempt(jt, ctx)


def _claim_cut_off(jt: JobType, rows: Any, pk: Any, owner: str, clock: Clock, cut: DatabaseError) -> str:
    """The claim was cut off: usually it never landed (nothing of ours to end). If it did and only its
    reply was lost, the attempt it counted is ended like any other cut-off attempt."""
    ctx = landed_claim(jt.name, rows, pk, owner, cut, ttl=jt.lease_ttl(), clock=clock, attempt_field="attempts")
    if ctx is None:
        return CUT_OFF
    return settle_job_cut_off(ctx, clock.read(), cut, "at the claim") or CUT_OFF


def _attempt(jt: JobType, ctx: JobContext, *, read_job: bool = False) -> str:
    """Run the claimed attempt `ctx` to its guarded finish (reading its `job` first if asked); return how it ended.

    Cut off from the database anywhere on the way, it ends its own attempt from what it reads back.
    """
    started = ctx.claimed_at or ctx.clock.read()
    try:
        if read_job:
            ctx.job = ctx.model._default_manager.get(pk=ctx.lease.pk)
        ending = work(jt, ctx)
        if ending.cut is not None:
            raise ending.cut
        if ending.lost is not None:
            return end_lost(ctx, started, ending.lost)
    except DatabaseError as cut:
        if not is_cut_off(cut):
            raise
        where = f"at step {ctx.step}" if ctx.step else "right after the claim"
        return settle_job_cut_off(ctx, started, cut, where) or JobAttempts(ctx, started).ended() or CUT_OFF
    try:
        return _finish(jt, ctx, started, ending)
    except DatabaseError as cut:
        if not is_cut_off(cut):
            raise
        return _finish_cut_off(jt, ctx, started, ending, cut)


def _finish_cut_off(jt: JobType, ctx: JobContext, started: Any, ending: "Ending", cut: DatabaseError) -> str:
    """The finish was cut off: end the attempt from what landed. A finish that landed with only its COMMIT's
    reply lost is the attempt's ending: said and told (`finished`) as if the reply had come."""
    settled = settle_job_cut_off(ctx, started, cut, "at the finish")
    if settled is not None:
        return settled
    ended = JobAttempts(ctx, started).ended()
    if ended == ending.outcome:  # ours: a takeover records only `blocked`, never this attempt's own outcome
        log_ending(ctx, ending)
        if jt.finished is not None:
            jt.finished(ctx, ending.outcome)
    return ended or CUT_OFF


def _finish(jt: JobType, ctx: JobContext, started: Any, ending: "Ending") -> str:
    """Write the attempt's finish: one guarded release of the job with its attempt record."""
    try:
        with transaction.atomic(using=router.db_for_write(ctx.model)):
            # The due time as the finish stored it: a retry's record carries the row's, not a second reading.
            stored = ctx.release_returning(["next_attempt_at"], **ending.fields)
            insert_receipts(JobAttempt, [ending.receipt(ctx, started, due=stored["next_attempt_at"])])
    except LeaseLost as lost:
        return end_lost(ctx, started, lost, "at the finish")
    log_ending(ctx, ending)
    if jt.finished is not None and not ending.undo:
        jt.finished(ctx, ending.outcome)
    return ending.outcome


def log_ending(ctx: JobContext, ending: "Ending") -> None:
    """Say a retried or failed attempt in the worker's log (once its finish landed), as a lost lease is said:
    an operator watching `qcluster` sees a job's failures there, not only in the admin."""
    if ending.outcome not in (JobAttempt.Outcome.RETRY, JobAttempt.Outcome.FAILED):
        return
    retry_in = ending.extra.get("retry_in")
    log = logger.warning if ending.outcome == JobAttempt.Outcome.FAILED else logger.info
    log(
        "event=job_%s job_type=%s id=%s attempt=%s fence=%s retry_in=%s reason=%s",
        ending.outcome,
        ctx.job_type,
        ctx.lease.pk,
        ctx.attempt,
        ctx.lease.fence,
        "-" if retry_in is None else f"{retry_in:.1f}s",
        outside_text(ending.reason, secrets=secret_values(), limit=300),
    )


@dataclass
class Ending:
    """How an attempt's work ended, before its finish is written: the outcome, the row's fields, the receipt's.

    `lost`: the work itself met a lost lease (a guarded write or a renewal refused): nothing is
    finished, the attempt is recorded as blocked. `cut`: the work was cut off from the database.
    """

    outcome: str
    fields: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    lost: LeaseLost | None = None
    cut: DatabaseError | None = None  # the link to the database failed (see `weave.jobs.cutoff`)
    # An undo attempt's ending: the job's `finished` hooks are not told of it (its steps did not run).
    undo: bool = False

    def receipt(self, ctx: JobContext, started: Any, *, due: Any = None) -> dict[str, Any]:
        """The attempt's record; `due`: the next try's time as the finish stored it on the row (a `retry`'s only)."""
        row = attempt_row(ctx, started, self.outcome, self.reason, **self.extra)
        if self.outcome == JobAttempt.Outcome.RETRY and due is not None:
            # Ended when the finish read the clock to count the due time from: due exactly `retry_in` later.
            row["retry_at"] = due
            if (retry_in := self.extra.get("retry_in")) is not None:
                row["finished_at"] = due - timedelta(seconds=retry_in)
        return row


def work(jt: JobType, ctx: JobContext) -> Ending:
    """Run the claimed attempt's handler or steps and say how it ended; the finish is the caller's to write."""
    ctx.attempt, ctx.epoch = ctx.job.attempts, ctx.job.epoch
    if not jt.records_takeovers:
        record_takeover(ctx)  # the attempt this claim took over, if its worker died without a finish
    if ctx.job.state == JobState.UNDOING:
        return _undo_work(jt, ctx)
    if not jt.records_takeovers and (spent := _tries_spent_by_takeover(jt, ctx)) is not None:
        return spent
    # A cancel-and-undo landing while this attempt runs moves the job on: its next save is refused.
    ctx.guard = dict(RUNNING)
    try:
        if jt.handler is not None:
            ctx.step = "run"
            ctx.results["run"] = _json_able(jt.handler(ctx), jt)
        else:
            _walk(jt, ctx)
    except LeaseLost as lost:
        return Ending("blocked", lost=lost)
    except DatabaseError as error:
        if is_cut_off(error):
            return Ending(CUT_OFF, cut=error)  # not the job's failure: nothing is known to have landed
        return _failure(jt, ctx, error)
    except Exception as error:  # noqa: BLE001  (the job's own failure: recorded, classified, never raised)
        return _failure(jt, ctx, error)
    value = ctx.results.get("run")
    saved = {jt.result_field: value} if jt.result_field else {}
    fields = _finish_fields(ctx, "", state=JobState.DONE, fields=saved)
    return Ending(JobAttempt.Outcome.DONE, fields, extra={"result": value})


def _tries_spent_by_takeover(jt: JobType, ctx: JobContext) -> Ending | None:
    """Fail the job, unstarted, when this claim took over an attempt that was the last its retry policy allows.

    An attempt whose worker dies (out of memory, killed at the cluster's timeout, a crash in a native
    library) counts as a failed try: otherwise a job that kills its worker every time would be started
    again at every lapse of its lease, forever, taking a worker down each time.
    """
    if not took_over(ctx.job):
        return None
    lost = ctx.attempt - 1
    error = AttemptUnfinished(f"attempt {lost} ended without a finish")
    policy = jt.policy(ctx.job)
    if policy.retry_in(lost, error) is not None:
        return None
    said = f"Not started: attempt {lost} ended without a finish (its worker stopped, crashed or stalled)"
    reason = _final(said, policy.why_final(lost, error))
    fields = _finish_fields(ctx, reason, state=JobState.FAILED)
    return Ending(JobAttempt.Outcome.FAILED, fields, reason)


def _undo_work(jt: JobType, ctx: JobContext) -> Ending:
    """Undo the cancelled job's saved steps, newest first, and say how the attempt ended (see `weave.jobs.undo`)."""
    try:
        walk = undo_saved(jt, ctx)
    except LeaseLost as lost:
        return Ending("blocked", lost=lost, undo=True)
    except DatabaseError as error:
        if is_cut_off(error):
            return Ending(CUT_OFF, cut=error, undo=True)
        raise
    record = {"undone": walk.undone, "left": walk.left, "failed": walk.failed_step}
    left = f" Left in place (no undo): {names(walk.left)}." if walk.left else ""
    if walk.stopped == "budget":
        reason = f"Budget spent while undoing; undone so far: {names(walk.undone)}.{left} The undo resumes."
        fields = _finish_fields(ctx, reason, state=JobState.UNDOING, retry_in=0.0)
        return Ending(
            JobAttempt.Outcome.RETRY, fields, reason, {"result": {"undo": record}, "retry_in": 0.0}, undo=True
        )
    if walk.stopped == "failed":
        return _undo_failure(jt, ctx, walk, record, left)
    ctx.step = ""
    reason = f"Cancelled and undone: {names(walk.undone)}.{left}"
    fields = _finish_fields(ctx, "", state=JobState.CANCELLED)
    return Ending(JobAttempt.Outcome.DONE, fields, reason, {"result": {"undo": record}}, undo=True)


def _undo_failure(jt: JobType, ctx: JobContext, walk: UndoWalk, record: dict[str, Any], left: str) -> Ending:
    """An undo raised: retried by the job's retry policy (counting the undo's own failures), else the job fails."""
    error = getattr(walk.error, "error", walk.error)
    assert error is not None  # a failed walk names its error
    ctx.error = error
    said, details = _error_record(error)
    reason = f"Undo of step {walk.failed_step} failed: {said}. Undone before it: {names(walk.undone)}.{left}"
    details["result"] = {"undo": record}
    policy = jt.policy(ctx.job)
    retry_in = policy.retry_in(undo_tries(ctx), error)
    if retry_in is None:
        reason = _final(reason, policy.why_final(undo_tries(ctx), error, what="undo try"))
        fields = _finish_fields(ctx, reason, state=JobState.FAILED)
        return Ending(JobAttempt.Outcome.FAILED, fields, reason, details, undo=True)
    fields = _finish_fields(ctx, reason, state=JobState.UNDOING, retry_in=retry_in)
    return Ending(JobAttempt.Outcome.RETRY, fields, reason, {**details, "retry_in": retry_in}, undo=True)


def _json_able(value: Any, jt: JobType) -> Any:
    """The handler's return value, refused here (a failure of this attempt) when no JSON column could keep it.

    Checked before the finish: a batch writes its finishes together, and one job's junk must not undo the others'.
    """
    try:
        json.dumps(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{jt.name}'s handler returned {type(value).__name__}, not JSON-able: {error}") from None
    return value


def _walk(jt: JobType, ctx: JobContext) -> None:
    """Run every step not yet done in this epoch; a step with a receipt is skipped and its result read back."""
    done = dict(
        JobStepReceipt.objects.filter(job_type=jt.name, job_id=str(ctx.lease.pk), epoch=ctx.epoch).values_list(
            "step", "result"
        )
    )
    plan = jt.plan()
    for step in plan:
        if step.name in done:
            ctx.results[step.name] = done[step.name]
    # Before any step's work: a step that can tell now that it would fail says so.
    check_steps(ctx, [step for step in plan if step.name not in done], lambda step: ctx)
    for step in plan:
        ctx.step = step.name
        if step.name in done:
            continue
        if ctx.budget_ends is not None and ctx.clock.monotonic() >= ctx.budget_ends:
            raise BudgetSpent(f"budget spent before step {step.name}; the job resumes there")
        _run_step(jt, ctx, step)


def _run_step(jt: JobType, ctx: JobContext, step: Step) -> None:
    result = step.run(ctx)
    with ctx.guarded():
        result = saved_result(step, ctx, result)
        row = {
            "job_type": jt.name,
            "job_id": str(ctx.lease.pk),
            "epoch": ctx.epoch,
            "step": step.name,
            "attempt": ctx.attempt,
            "owner": ctx.lease.owner,
            "fence": ctx.lease.fence,
            "idempotency_key": ctx.idempotency_key,
            "result": result,
            "finished_at": ctx.clock.now(),
        }
        insert_receipts(JobStepReceipt, [row])
    ctx.results[step.name] = result


def _finish_fields(
    ctx: JobContext, reason: str, *, state: str, retry_in: float | None = None, **more: Any
) -> dict[str, Any]:
    """The fields a finish writes to the job's row (with the release of its lease): state, error, due time."""
    clock = ctx.clock
    fields: dict[str, Any] = {"state": state, "last_error": outside_text(reason, limit=2000), **more.pop("fields", {})}
    fields["next_attempt_at"] = None if retry_in is None else clock.now(timedelta(seconds=retry_in))
    fields["finished_at"] = clock.now() if state not in RUNNABLE_STATES else None
    return fields


def settle_job_cut_off(ctx: JobContext, started: Any, cut: DatabaseError, where: str) -> str | None:
    """End attempt `ctx`, cut off `where`, in its `JobAttempt` records (`weave.jobs.cutoff.settle_cut_off`).

    A lease still ours gives the job back pending and due now, recorded as `retry`; None: its ending
    had already landed.
    """

    def give_back(reason: str) -> tuple[str, str]:
        # Not under the attempt's state guard: whether it ran steps or undid them, the job stays in its
        # state (pending or undoing) and is due at once.
        ctx.rows.release(
            ctx.lease,
            clock=ctx.clock,
            last_error=outside_text(reason, limit=2000),
            next_attempt_at=None,
            finished_at=None,
        )
        return str(JobAttempt.Outcome.RETRY), "Gave the job back."

    return settle_cut_off(ctx, JobAttempts(ctx, started), cut, where, give_back)


def end_lost(ctx: JobContext, started: Any, lost: LeaseLost, where: str = "") -> str:
    """End attempt `ctx` after a write or renewal was refused: handed on to an undo asked meanwhile
    ("cancelled") when the lease is still ours, else recorded as blocked by `lost`."""
    where = where or (f"at step {ctx.step}" if ctx.step else "at the finish")
    if hand_on(ctx, started, where):
        return str(JobAttempt.Outcome.CANCELLED)
    record_job_blocked(ctx, started, lost)
    return "blocked"


def record_job_blocked(ctx: JobContext, started: Any, lost: LeaseLost) -> None:
    """Record the attempt `ctx` as blocked by `lost` (unless the worker that took the job over already did)."""
    where = f"at step {ctx.step}" if ctx.step else "at the finish"
    # A takeover's guess that this worker died is no ending of its own: this account replaces it.
    record_blocked(ctx, JobAttempts(ctx, started), lost, where)


def _error_record(error: BaseException) -> tuple[str, dict[str, Any]]:
    """The error's one-line text and its stored details (class, traceback), the site's secrets redacted:
    an exception message may quote a configured token, and what is stored is never shown raw elsewhere."""
    import traceback

    secrets = secret_values()
    said = redact(f"{type(error).__name__}: {error}", secrets)
    details = {
        "error_class": f"{type(error).__module__}.{type(error).__qualname__}",
        "traceback": multiline_text("".join(traceback.format_exception(error)), secrets=secrets),
    }
    return said, details


def _final(reason: str, why: str) -> str:
    return f"{reason}. {why}" if why and not reason.endswith(".") else " ".join(filter(None, (reason, why)))


def _failure(jt: JobType, ctx: JobContext, error: Exception) -> Ending:
    ctx.error = error
    said, details = _error_record(error)
    reason = said + (f" (at step {ctx.step})" if ctx.step else "")
    policy = jt.policy(ctx.job)
    retry_in = 0.0 if isinstance(error, BudgetSpent) else policy.retry_in(ctx.attempt, error)
    if retry_in is None:
        reason = _final(reason, policy.why_final(ctx.attempt, error))
        fields = _finish_fields(ctx, reason, state=JobState.FAILED)
        return Ending(JobAttempt.Outcome.FAILED, fields, reason, details)
    fields = _finish_fields(ctx, reason, state=JobState.PENDING, retry_in=retry_in)
    return Ending(JobAttempt.Outcome.RETRY, fields, reason, {**details, "retry_in": retry_in})

"""Run one onboarding attempt: claim, then each remaining step's work, then its guarded save.

    run_onboarding(run_id) -> "completed" | "released" | "failed" | "blocked" | "busy" | "not_claimable" | "cut_off"

The attempt runs on the `weave.jobs` API: `weave.jobs.claim()` takes the run by the database clock
and opens the attempt's `JobContext`, and every write under the lease goes through it (its
`guarded()` transactions, `release()`, `heartbeat()`, the lost-lease reason). Its steps are
`weave.jobs.Step`s, walked with the core's step helpers (the steps after the run's phase, the phase a
save expects, the checks, the heartbeat around a step's work, the undo walk). What is onboarding's
own is the records of a run: its receipt and attempt tables. `Claim` is this attempt's records
(`weave.jobs.AttemptRecords`), so a cut-off or blocked attempt is settled by the core
(`weave.jobs.settle_cut_off`, `record_blocked`) with onboarding's own give-back.

`claim_attempt()` claims the run (a new fence), marks it running, marks older attempts that died as
crashed, opens this attempt's row, and loads the plan the run recorded when it started. Only then
does an `Attempt` exist: it always holds a lease, a run and its steps.

Per step: the heartbeat renews before the slow part, every ttl/3 during it and once more right
before the save; then one transaction holds the guarded phase save (owner, fence, live expiry,
phase = previous, status = running), the step's domain writes and its receipt. Zero rows from the
guard raises `LeaseLost` and rolls all of it back. A lost lease ends the attempt `blocked`: the
worker writes its own attempt row and nothing else.

Cancelling only sets `status = cancelled`; the guard's `status = running` then refuses the worker's
next save, and the worker gives its lease back. "Cancel and undo" also sets `undo_state =
requested`: the next attempt claims the cancelled run and runs each committed step's `undo`, newest
first, each in its own guarded transaction.

Cut off from the database mid-attempt (a partition, a server-side session timeout), the
worker reads back on a fresh connection what landed and writes only its own attempt's ending;
"cut_off" means the claim itself never landed, so there is nothing of ours to end.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypedDict, Unpack

from django.db import DatabaseError, transaction

from onboarding import queue
from onboarding.client import SupplierServices
from onboarding.errors import PermanentFailure, StepFailure, TemporaryFailure
from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.steps.plan import DEFAULT_PLAN, PlanError, load_plan
from onboarding.steps.protocol import Output, StepContext, receipt_output
from weave import jobs
from weave.conf import secret_values, weave_settings
from weave.edge import decode, redact
from weave.events import log_event
from weave.jobs import (
    JobContext,
    PhaseError,
    Step,
    backoff_seconds,
    check_steps,
    first_line,
    landed_claim,
    phase_before,
    record_blocked,
    settle_cut_off,
    steps_after,
    undo_steps,
    working,
)
from weave.leases import Clock, Heartbeat, Lease, LeaseBusy, LeaseLost, NotClaimable, default_clock, new_owner
from weave.operations import clock_time
from weave.workers import is_cut_off, tell_watchers

logger = logging.getLogger("weave.onboarding")
JOB = "onboarding"
Status = OnboardingRun.Status
Outcome = RunAttempt.Outcome
Undo = OnboardingRun.Undo
UNDOING = {"status": Status.CANCELLED, "undo_state": Undo.REQUESTED}
RUNNING = {"status": Status.RUNNING}
AFTER_CLAIM = "right after the claim"  # where a cut or a lost lease met the claim's first guarded write
# Attempts in a row that may crash without saving a step (their workers never came back) before the run
# fails: a step that takes its worker down must not do so at every lapse of the lease, forever. A worker
# that only stalled records its own ending (blocked) when it wakes, and is not counted.
CRASHED_IN_A_ROW = 3


def storable(reason: str) -> str:
    """Return `reason` as text every database stores, and shows: valid Unicode, no NUL, the site's
    configured secrets and any credentials redacted (a service's error may quote the token it refused),
    as the core's runner stores its reasons."""
    return redact(decode(reason), secret_values()).replace("\x00", "\ufffd")


class AttemptEnded(Exception):
    """The claim landed but the attempt ended at once (its first guarded write was refused)."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome


class Claim:
    """A lease on one run (a `weave.jobs` attempt context), and the attempt row that records how this claim ends."""

    def __init__(self, run_id: Any, job: JobContext) -> None:
        self.run_id = run_id
        self.job = job  # every guarded write of this attempt goes through it
        self.lease = job.lease
        self.clock = job.clock
        self.attempt_id: int | None = None  # None until the claim's first transaction commits
        self.outcome: str = Outcome.RUNNING
        self.reason = ""

    def release(self, *, expect: dict[str, Any], **fields: Any) -> None:
        """Give the run back in one guarded statement that also writes `fields`."""
        if "reason" in fields:
            fields["reason"] = storable(fields["reason"])
        self.job.release(expect=expect, **fields)

    def end(self, outcome: str, reason: str, *, retry_due_at: Any = None) -> None:
        """Record how this attempt ended (and log it); `retry_due_at` is a release's next due time."""
        reason = storable(reason)  # a reason PostgreSQL refuses would leave the attempt running forever
        self.outcome, self.reason = outcome, reason
        now = self.clock.now()
        if self.attempt_id is None:
            self.attempt_id = RunAttempt.objects.create(
                run_id=self.run_id,
                fence=self.lease.fence,
                owner=self.lease.owner,
                started_at=now,
                ended_at=now,
                outcome=outcome,
                reason=reason,
                retry_due_at=retry_due_at,
            ).pk
        else:
            # Unconditional on purpose: a stalled attempt marked crashed by a newer claim says "blocked" in the end.
            RunAttempt.objects.filter(pk=self.attempt_id).update(
                outcome=outcome, reason=reason, ended_at=now, retry_due_at=retry_due_at
            )
        event = {str(Outcome.COMPLETED): "completed", str(Outcome.RELEASED): "released"}.get(outcome, str(outcome))
        log_event(logger, event, job=JOB, id=self.run_id, owner=self.lease.owner, fence=self.lease.fence, reason=reason)

    def lost(self, lost: LeaseLost, where: str) -> None:
        """Record our own attempt as blocked (or released, if the run was cancelled) and write nothing else."""
        row = OnboardingRun.objects.filter(pk=self.run_id).values("status", "owner", "fence", "undo_state").first()
        if row and row["status"] == Status.CANCELLED:
            with transaction.atomic():
                if (row["owner"], row["fence"]) == (self.lease.owner, self.lease.fence):
                    try:
                        self.release(expect={"status": Status.CANCELLED})
                    except LeaseLost:
                        pass  # our lease ran out meanwhile: there is nothing left to give back
                    else:
                        if row["undo_state"] == Undo.REQUESTED:
                            # The operator asked for an undo while we held the run: hand it straight on.
                            transaction.on_commit(partial(queue.enqueue_run, self.run_id))
                self.end(Outcome.RELEASED, f"The run was cancelled; stopped {where} without saving.")
            return
        record_blocked(self.job, self, lost, where, noun="run")

    def cut_off(self, cut: DatabaseError, where: str) -> None:
        """End our own attempt honestly after the database link failed mid-attempt (the core's settlement)."""
        settle_cut_off(self.job, self, cut, where, self._give_back, lost_words=str)

    def _give_back(self, reason: str) -> tuple[str, str]:
        """After a cut: give the run back if our lease is still live (a cancelled run stays cancelled; the
        cut may have undone "running"), and ask for the next attempt at commit."""
        row = OnboardingRun.objects.filter(pk=self.run_id).values("status").first()
        if row is None or not self.job.still_held():
            raise LeaseLost("Our lease ran out meanwhile.")
        fields = {} if row["status"] == Status.CANCELLED else {"status": Status.PENDING, "reason": reason}
        self.release(expect={"status": row["status"]}, **fields)
        transaction.on_commit(partial(queue.enqueue_run, self.run_id))
        return Outcome.RELEASED, "Gave the run back."

    # --- this attempt's records, as the core's settlement reads them (`weave.jobs.AttemptRecords`) ----

    def ended(self) -> str | None:
        """Our outcome if our ending already landed (an ending commits with the write it ends), taken as ours."""
        if self.attempt_id is None:
            return None
        row = RunAttempt.objects.filter(pk=self.attempt_id).values_list("outcome", "reason").first()
        if row is None:
            # The transaction that opened our attempt never landed: end() writes a new one (unless the
            # run itself is gone, its attempts with it: then there is nothing left to write to).
            if OnboardingRun.objects.filter(pk=self.run_id).exists():
                self.attempt_id = None
            return None
        if row[0] in (Outcome.RUNNING, Outcome.CRASHED):
            return None
        self.outcome, self.reason = row
        return self.outcome

    def landed(self, where: str) -> str:
        """Whether our attempt's start (cut right after the claim) or the current step's save landed."""
        step = self.job.step
        if where == AFTER_CLAIM and self.attempt_id is not None:
            return "its start had landed before the link failed"
        saves = StepReceipt.objects.filter(run_id=self.run_id, step=step, fence=self.lease.fence)
        if where != AFTER_CLAIM and saves.exists():
            return f"its save of {step} had landed before the link failed"
        return "the open transaction was aborted by the server and nothing of it landed"

    def owner_at(self, fence: int) -> str | None:
        """The owner of this run's attempt at `fence` (who took the run over, once it is free again)."""
        owner: str | None = (
            RunAttempt.objects.filter(run_id=self.run_id, fence=fence).values_list("owner", flat=True).first()
        )
        return owner


def _mark_crashed(run_id: Any, lease: Lease, clock: Clock) -> bool:
    """Mark the older attempts still "running" crashed; return whether there was one."""
    # An older attempt still "running" had its lease expire without ending: its worker died or stalled.
    # If it was only stalled, it overwrites this with "blocked" when it wakes up and is refused.
    stale = RunAttempt.objects.filter(run_id=run_id, outcome=Outcome.RUNNING, fence__lt=lease.fence)
    crashed = False
    for pk, owner, fence in stale.values_list("pk", "owner", "fence"):
        reason = (
            f"Lease expired while this attempt was still running; taken over by {lease.owner} at fence {lease.fence}."
        )
        RunAttempt.objects.filter(pk=pk).update(outcome=Outcome.CRASHED, ended_at=clock.now(), reason=reason)
        log_event(logger, "crashed", job=JOB, id=run_id, owner=owner, fence=fence, reason=reason)
        crashed = True
    return crashed


class AttemptOptions(TypedDict, total=False):
    """The keywords of `claim_attempt` and `run_onboarding` (unset or None: the WEAVE setting)."""

    owner: str | None
    ttl: float | None
    budget: float | None
    clock: Clock
    background: bool  # False renews only before the work and before the save (FakeClock tests tick())
    steps: Sequence[Step] | None  # replaces the run's recorded plan: a seam for tests, not for sites
    services: SupplierServices | None


def claim_attempt(run_id: Any, **options: Unpack[AttemptOptions]) -> "Attempt":
    """Claim run `run_id` for one attempt and return it, ready to `execute()`.

    Raises `LeaseBusy` (a live lease is someone else's), `NotClaimable` (finished or gone), or
    `AttemptEnded` (claimed, but the first guarded write was refused; the attempt row says why).
    """
    owner = options.get("owner") or new_owner("onboarding:")
    ttl_option, budget = options.get("ttl"), options.get("budget")
    ttl = float(ttl_option if ttl_option is not None else weave_settings.ONBOARDING_LEASE_TTL)
    clock = options.get("clock", default_clock)
    steps = options.get("steps")
    # A run released on a temporary failure is not claimed before its due time (the service's Retry-After),
    # even by a task that was queued before the release.
    budget_option = float(budget if budget is not None else weave_settings.ONBOARDING_BUDGET)
    try:
        rows = OnboardingRun.objects.claimable().due(clock)
        job = jobs.claim(JOB, rows, run_id, owner=owner, ttl=ttl, clock=clock, budget=budget_option)
    except DatabaseError as cut:
        if not is_cut_off(cut):
            raise
        raise _claim_cut_off(run_id, owner, ttl, clock, cut) from cut
    lease = job.lease
    started = clock.monotonic()
    log_event(logger, "claim", job=JOB, id=run_id, owner=lease.owner, fence=lease.fence)
    claim = Claim(run_id, job)
    # What the claim took: an active run, or a cancelled one waiting for its undo (claimable() allows both).
    undoing = OnboardingRun.objects.undo_requested().filter(pk=run_id).exists()
    try:
        if undoing:
            first = job.guarded(expect=UNDOING, renew=False, reason="Undoing the committed steps.")
        else:
            first = job.guarded(
                expect={"status__in": OnboardingRun.ACTIVE}, renew=False, status=Status.RUNNING, next_attempt_at=None
            )
        with first:
            after_crash = _mark_crashed(run_id, lease, clock)
            claim.attempt_id = RunAttempt.objects.create(
                run_id=run_id, fence=lease.fence, owner=lease.owner, started_at=clock.now()
            ).pk
    except LeaseLost as lost:
        claim.lost(lost, AFTER_CLAIM)
        raise AttemptEnded(claim.outcome, claim.reason) from lost
    except DatabaseError as cut:
        if not is_cut_off(cut):
            raise
        claim.cut_off(cut, AFTER_CLAIM)
        raise AttemptEnded(claim.outcome, claim.reason) from cut
    run = OnboardingRun.objects.select_related("supplier").get(pk=run_id)
    job.job = run
    plan_error = ""
    if steps is None:
        try:
            steps = load_plan(run.plan or DEFAULT_PLAN)
        except PlanError as exc:
            steps, plan_error = (), f"The run's recorded plan cannot be loaded: {exc}"
    receipts = StepReceipt.objects.filter(run_id=run_id).order_by("completed_at", "pk")
    return Attempt(
        claim=claim,
        run=run,
        steps=tuple(steps),
        outputs={step: output for step, output in receipts.values_list("step", "output")},
        ttl=ttl,
        budget=budget_option,
        background=options.get("background", True),
        started=started,
        undoing=undoing,
        after_crash=after_crash,
        plan_error=plan_error,
        services_given=options.get("services"),
    )


def _claim_cut_off(run_id: Any, owner: str, ttl: float, clock: Clock, cut: DatabaseError) -> AttemptEnded:
    """The claim itself was cut off. Usually its transaction never committed (the server aborts it) and
    nothing of ours exists to end: the run stays claimable. If the COMMIT landed and only its reply was
    lost, the row names us: give it back under that lease and say so in our own attempt."""
    job = landed_claim(JOB, OnboardingRun.objects, run_id, owner, cut, ttl=ttl, clock=clock)
    if job is None:
        return AttemptEnded("cut_off", f"during the claim: {first_line(cut)}")
    claim = Claim(run_id, job)

    def give_back(reason: str) -> tuple[str, str]:
        claim.release(expect={})
        transaction.on_commit(partial(queue.enqueue_run, run_id))
        return Outcome.RELEASED, "gave the run back."

    reason = f"The claim landed but its reply was cut off ({first_line(cut)});"
    settle_cut_off(job, claim, cut, "at the claim", give_back, reason=reason, lost_words=str)
    return AttemptEnded(claim.outcome, claim.reason)


@dataclass
class Attempt:
    """One worker's attempt at a claimed run. `execute()` does it all; tests may drive the parts."""

    claim: Claim
    run: OnboardingRun
    steps: tuple[Step, ...]
    outputs: dict[str, Output]
    ttl: float
    budget: float
    background: bool  # False renews only before the work and before the save (FakeClock tests call tick())
    started: float  # clock.monotonic() at the claim
    undoing: bool = False
    after_crash: bool = False  # this claim found the attempt before it crashed (a worker that never came back)
    plan_error: str = ""
    services_given: SupplierServices | None = None
    heartbeats: dict[str, Heartbeat] = field(default_factory=dict)
    _services: SupplierServices | None = None

    @property
    def job(self) -> JobContext:
        """The `weave.jobs` context of this attempt: its guarded writes, heartbeats and budget."""
        return self.claim.job

    @property
    def lease(self) -> Lease:
        return self.claim.lease

    @property
    def clock(self) -> Clock:
        return self.claim.clock

    @property
    def run_id(self) -> Any:
        return self.claim.run_id

    @property
    def outcome(self) -> str:
        return self.claim.outcome

    # --- the whole attempt ------------------------------------------------------------------------

    def execute(self) -> str:
        """Take the claimed run as far as it goes; return how the attempt ended."""
        try:
            if self.undoing:
                self._guard_lost(self.undo_committed, "while undoing")
            else:
                self._work_through()
        finally:
            if self.services_given is None and self._services is not None:
                self._services.close()
        return str(self.outcome)

    def _guard_lost(self, body: Callable[[], None], where: str) -> None:
        try:
            try:
                body()
            except LeaseLost as lost:
                self.claim.lost(lost, where)
        except DatabaseError as cut:
            if not is_cut_off(cut):
                raise
            self.claim.cut_off(cut, where)

    def _work_through(self) -> None:
        job = self.job
        job.step = "resume"  # where we are, for the reasons a person reads
        try:
            try:
                try:
                    if self.plan_error:
                        raise PermanentFailure(self.plan_error)
                    remaining = self.remaining_steps()
                    job.step = remaining[0].name if remaining else "completion"
                    self.refuse_after_crashes()
                    # Before any outside call or domain write: a step that can tell now that its commit
                    # part would fail says so, so a run never fails halfway for a reason known at the start.
                    check_steps(job, remaining, self.context)
                    job.step = "resume"
                    for step in remaining:
                        job.step = step.name
                        if self.budget_left() <= 0:
                            self.give_back(
                                f"Attempt budget of {self.budget:g} s spent before {step.name}.", requeue=True
                            )
                            return
                        self.run_step(step)
                    job.step = "completion"
                    self.complete()
                except TemporaryFailure as exc:
                    self.release_for_retry(exc, job.step)
                except PermanentFailure as exc:
                    self.fail(f"{job.step}: {exc.reason}", step=job.step, fixable=exc.fixable)
            except LeaseLost as lost:
                self.claim.lost(lost, f"at {job.step}")
        except DatabaseError as cut:
            if not is_cut_off(cut):
                raise
            # The link to the database failed (a partition, a server-side timeout): say so on a fresh one.
            self.claim.cut_off(cut, f"at {job.step}")

    # --- the parts ----------------------------------------------------------------------------------

    def remaining_steps(self) -> list[Step]:
        """The steps after the run's phase (the last step whose save landed)."""
        try:
            return steps_after(self.steps, self.run.phase, noun="run")
        except PhaseError as exc:
            raise PermanentFailure(str(exc)) from exc

    def refuse_after_crashes(self) -> None:
        """Raise `PermanentFailure` when the latest attempts before this one, CRASHED_IN_A_ROW of them, each
        crashed without saving a step: whatever they reached takes its worker down.

        Not asked while undoing: a crashed attempt's record does not say whether it ran the steps or their
        undo, and crashes of the steps must not fail an undo that never ran."""
        if not self.after_crash:
            return  # the attempt before this one ended: no read needed
        earlier = RunAttempt.objects.filter(run_id=self.run_id, fence__lt=self.lease.fence).order_by("-fence")
        latest = list(earlier.values_list("outcome", "fence")[:CRASHED_IN_A_ROW])
        if len(latest) < CRASHED_IN_A_ROW or any(outcome != Outcome.CRASHED for outcome, _ in latest):
            return
        # An attempt that saved a step before it died got further: the run is moving, not stuck.
        if StepReceipt.objects.filter(run_id=self.run_id, fence__in=[fence for _, fence in latest]).exists():
            return
        raise PermanentFailure(
            f"Not started: the last {len(latest)} attempts crashed without saving a step (their workers stopped "
            "or died while holding the run, and never came back). Retry the run once the cause is fixed."
        )

    def previous_phase(self, step: Step) -> str:
        """The phase the guarded save of `step` expects: the step before it in the plan ("" for the first)."""
        try:
            return phase_before(self.steps, step.name, noun="run")
        except PhaseError as exc:
            raise PermanentFailure(str(exc)) from exc

    def budget_left(self) -> float:
        left = self.job.budget_left()
        return self.budget - (self.clock.monotonic() - self.started) if left is None else left

    def context(self, step: Step) -> StepContext:
        return StepContext(
            run=self.run,
            step_name=step.name,
            lease=self.lease,
            clock=self.clock,
            services=self.services,
            outputs=self.outputs,
        )

    def run_step(self, step: Step) -> Output:
        """Do `step`'s slow part under the heartbeat, then its guarded save, writes and receipt."""
        lease = self.lease
        ctx = self.context(step)
        keep = partial(self.heartbeats.__setitem__, step.name)
        with working(self.job, background=self.background, lost_wins_over=(StepFailure,), made=keep) as heartbeat:
            ctx.heartbeat = heartbeat
            output = step.run(ctx)
        # The heartbeat has stopped; its renewal right before the save left the transaction a whole ttl.
        ctx.committing = True
        expect = {"phase": self.previous_phase(step), "status": Status.RUNNING}
        with self.job.guarded(expect=expect, renew=False, phase=step.name):
            output = receipt_output(step, ctx, dict(output or {}))
            StepReceipt.objects.create(
                run_id=self.run_id,
                step=step.name,
                fence=lease.fence,
                owner=lease.owner,
                completed_at=self.clock.now(),
                output=output,
            )
        self.run.phase = step.name
        self.outputs[step.name] = output
        log_event(logger, "step_saved", job=JOB, id=self.run_id, owner=lease.owner, fence=lease.fence, step=step.name)
        return output

    def complete(self) -> None:
        """Finish the run with a guarded save that also gives the lease back."""
        with transaction.atomic():
            self.claim.release(
                expect={"phase": self.steps[-1].name, "status": Status.RUNNING},
                status=Status.COMPLETED,
                reason=f"All {len(self.steps)} steps done.",
                finished_at=self.clock.now(),
            )
            self.claim.end(Outcome.COMPLETED, f"Completed the run at fence {self.lease.fence}.")

    def give_back(self, reason: str, *, requeue: bool, delay: float | None = None, undo: bool = False) -> None:
        """Release the run for a later attempt (temporary failure or budget spent): as pending, or with `undo`
        still cancelled and waiting for its undo.

        With `delay` the run is due again that many seconds from the database's now; the due-time watcher
        asks for the next attempt then. The reasons carry that database time.
        """
        expect, back = (UNDOING, {"undo_state": Undo.REQUESTED}) if undo else (RUNNING, {"status": Status.PENDING})
        with transaction.atomic():
            due = None
            if delay is not None:
                # Read the due time off the database clock first, so the one guarded release writes it and
                # the reason that names it.
                due = self.job.database_time(delay)
                reason = f"{reason} Next attempt due at {clock_time(due)} (database time)."
            fields: dict[str, Any] = back if due is None else {**back, "next_attempt_at": due}
            self.claim.release(expect=expect, reason=reason, **fields)
            self.claim.end(Outcome.RELEASED, reason, retry_due_at=due)
            if requeue:
                transaction.on_commit(partial(queue.enqueue_run, self.run_id))
            if due is not None:
                transaction.on_commit(tell_watchers)  # the watchers sleep until the new due time

    def release_for_retry(self, failure: TemporaryFailure, stage: str) -> None:
        """Release the run after a temporary failure, due again after the service's Retry-After or our backoff."""
        delay, why = self._retry_delay(failure)
        self.give_back(
            f"{stage}: {failure.reason} Waiting {delay:.1f} s for a later attempt ({why}).", requeue=False, delay=delay
        )

    def _retry_delay(self, failure: TemporaryFailure) -> tuple[float, str]:
        """How long the run waits after `failure`: the service's Retry-After, or our backoff; and why."""
        if failure.retry_after is not None:
            return failure.retry_after, "as the service asked with Retry-After"
        releases = RunAttempt.objects.filter(run_id=self.run_id, outcome=Outcome.RELEASED).count()
        delay = backoff_seconds(
            releases + 1,
            base=weave_settings.ONBOARDING_RELEASE_BACKOFF,
            cap=weave_settings.ONBOARDING_RELEASE_BACKOFF_MAX,
        )
        return delay, "backoff with jitter"

    def fail(self, reason: str, *, step: str = "", fixable: bool = True) -> None:
        """End the run as failed with `reason`, under the guard; record the step and whether a retry may fix it."""
        with transaction.atomic():
            self.claim.release(
                expect=RUNNING,
                status=Status.FAILED,
                reason=reason,
                finished_at=self.clock.now(),
                failed_step=step if step in {s.name for s in self.steps} else "",
                failure_fixable=fixable,
            )
            self.claim.end(Outcome.FAILED, reason)

    def undo_committed(self) -> None:
        """Run the undo of every committed step that declares one, newest first, each under the guard."""
        receipts = StepReceipt.objects.filter(run_id=self.run_id, undone_at__isnull=True).order_by(
            "-completed_at", "-pk"
        )
        walk = undo_steps(
            self.steps,
            receipts,
            self.undo_step,
            name_of=lambda receipt: receipt.step,
            budget_left=self.budget_left,
            failures=(StepFailure,),
        )
        undone = _names(walk.undone)
        if walk.stopped == "budget":
            self.give_back(f"Attempt budget spent while undoing; undone so far: {undone}.", requeue=True, undo=True)
            return
        if isinstance(walk.error, TemporaryFailure):
            # An undo's outside call that failed for now is tried again later, not given up.
            delay, why = self._retry_delay(walk.error)
            said = f"Undo of {walk.failed_step} failed for now: {walk.error.reason} Undone before it: {undone}."
            self.give_back(f"{said} Waiting {delay:.1f} s ({why}).", requeue=False, delay=delay, undo=True)
            return
        if isinstance(walk.error, StepFailure):
            self._end_undo(
                Undo.FAILED, f"Undo of {walk.failed_step} failed: {walk.error.reason} Undone before it: {undone}."
            )
            return
        reason = f"Cancelled and undone: {undone}."
        if walk.left:
            reason += f" Left in place (no undo): {_names(walk.left)}."
        self._end_undo(Undo.DONE, reason)

    def undo_step(self, step: Step, receipt: StepReceipt) -> None:
        """One step's undo: its outside calls (`undo_work`) under the heartbeat, then the guarded save (the run
        is still cancelled, undo still asked, lease ours), the step's compensating writes and the receipt's
        undone mark, in one transaction."""
        if not step.undoable:
            raise PermanentFailure(f"Step {step.name} declares no undo.")
        ctx = self.context(step)
        ctx.undoing = True
        value: Any = dict(receipt.output)
        if step.undo_run is not None:
            keep = partial(self.heartbeats.__setitem__, f"undo {step.name}")
            with working(self.job, background=self.background, lost_wins_over=(StepFailure,), made=keep) as beat:
                ctx.heartbeat = beat
                value = step.undo_run(ctx, value)
        ctx.committing = True
        with self.job.guarded(expect=UNDOING, renew=False, reason=f"Undoing: {step.name} at fence {self.lease.fence}."):
            if step.undo is not None:
                step.undo(ctx, value)
            StepReceipt.objects.filter(pk=receipt.pk, undone_at__isnull=True).update(
                undone_at=self.clock.now(), undone_fence=self.lease.fence
            )
        log_event(
            logger,
            "step_undone",
            job=JOB,
            id=self.run_id,
            owner=self.lease.owner,
            fence=self.lease.fence,
            step=step.name,
        )

    def _end_undo(self, state: str, reason: str) -> None:
        with transaction.atomic():
            self.claim.release(expect=UNDOING, undo_state=state, reason=reason)
            self.claim.end(Outcome.RELEASED, reason)

    # --- helpers ------------------------------------------------------------------------------------

    def services(self) -> SupplierServices:
        if self.services_given is not None:
            return self.services_given
        if self._services is None:
            self._services = SupplierServices()
        return self._services


def _names(names: list[str]) -> str:
    return ", ".join(names) or "nothing"


def run_onboarding(run_id: Any, **options: Unpack[AttemptOptions]) -> str:
    """Claim run `run_id` and run one attempt at it; return how it ended (see the module docstring)."""
    try:
        attempt = claim_attempt(run_id, **options)
    except LeaseBusy as busy:
        # Another worker is on it: at-least-once delivery makes this normal, not an error.
        log_event(logger, "busy", job=JOB, id=run_id, reason=str(busy))
        return "busy"
    except NotClaimable as exc:
        log_event(logger, "not_claimable", job=JOB, id=run_id, reason=str(exc))
        return "not_claimable"
    except AttemptEnded as ended:
        return ended.outcome
    return attempt.execute()

"""Run one onboarding attempt: claim, resume after the last receipt, one guarded save per step.

    run_onboarding(run_id) -> "completed" | "released" | "failed" | "blocked" | "busy" | "not_claimable"

Per step: the heartbeat renews before the slow part, every ttl/3 during it and once more right
before the save; then one transaction holds the guarded phase save (owner, fence, live expiry,
phase = previous, status = running), the step's domain writes and its receipt. Zero rows from the
guard raises `LeaseLost` and rolls all of it back. A lost lease ends the attempt `blocked`: the
worker writes its own attempt row and nothing else.

Cancelling from the admin only sets `status = cancelled`; the guard's `status = running` then
refuses the worker's next save, and the worker gives its lease back.
"""

import logging
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any, TypedDict, Unpack

from django.db import transaction

from onboarding import queue
from onboarding.client import SupplierServices
from onboarding.errors import PermanentFailure, StepFailure, TemporaryFailure
from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.steps import STEPS, Step, StepContext
from weave import wake
from weave.conf import weave_settings
from weave.events import log_event
from weave.leases import Clock, Heartbeat, Lease, LeaseBusy, LeaseLost, NotClaimable, default_clock, new_owner
from weave.retry import backoff_seconds
from weave.timeline import clock_time

logger = logging.getLogger("weave.onboarding")
JOB = "onboarding"
Status = OnboardingRun.Status
Outcome = RunAttempt.Outcome


class Attempt:
    """One worker's attempt at one run. `execute()` does it all; tests may drive the parts."""

    def __init__(
        self,
        run_id: Any,
        *,
        owner: str | None = None,
        ttl: float | None = None,
        budget: float | None = None,
        clock: Clock = default_clock,
        background: bool = True,
        steps: Sequence[Step] = STEPS,
        services: SupplierServices | None = None,
    ) -> None:
        self.run_id = run_id
        self.owner = owner or new_owner("onboarding:")
        self.ttl = float(ttl if ttl is not None else weave_settings.ONBOARDING_LEASE_TTL)
        self.budget = float(budget if budget is not None else weave_settings.ONBOARDING_BUDGET)
        self.clock = clock
        # False renews only before the work and before the save (FakeClock tests call hb.tick()).
        self.background = background
        self.steps = tuple(steps)
        self._services = services
        self._own_services = services is None
        self.lease: Lease | None = None
        self.run: OnboardingRun | None = None
        self.attempt_id: int | None = None
        self.outputs: dict[str, dict[str, Any]] = {}
        self.heartbeats: dict[str, Heartbeat] = {}
        self.outcome: str | None = None
        self.reason = ""
        self._started = 0.0

    # --- the whole attempt ------------------------------------------------------------------------

    def execute(self) -> str:
        """Claim the run and take it as far as it goes; return how the attempt ended."""
        try:
            self.claim()
        except LeaseBusy as busy:
            # Another worker is on it: at-least-once delivery makes this normal, not an error.
            log_event(logger, "busy", job=JOB, id=self.run_id, owner=self.owner, reason=str(busy))
            return "busy"
        except NotClaimable as exc:
            log_event(logger, "not_claimable", job=JOB, id=self.run_id, owner=self.owner, reason=str(exc))
            return "not_claimable"
        try:
            if self.outcome is not None:  # the run changed between the claim and our first save
                return str(self.outcome)
            self._work_through()
        finally:
            if self._own_services and self._services is not None:
                self._services.close()
        return str(self.outcome or Outcome.RUNNING)

    def _work_through(self) -> None:
        stage = "resume"  # where we are, for the reasons a person reads
        try:
            try:
                for step in self.remaining_steps():
                    stage = step.name
                    if self.budget_left() <= 0:
                        self.give_back(f"Attempt budget of {self.budget:g} s spent before {step.name}.", requeue=True)
                        return
                    self.run_step(step)
                stage = "completion"
                self.complete()
            except TemporaryFailure as exc:
                self.release_for_retry(exc, stage)
            except PermanentFailure as exc:
                self.fail(f"{stage}: {exc.reason}")
        except LeaseLost as lost:
            self.on_lost(lost, f"at {stage}")

    # --- the parts ----------------------------------------------------------------------------------

    def claim(self) -> Lease:
        """Claim the run (bumping its fence), mark it running, mark crashed attempts, open our attempt."""
        lease = OnboardingRun.objects.active().claim(self.run_id, owner=self.owner, ttl=self.ttl, clock=self.clock)
        self.lease = lease
        self._started = self.clock.monotonic()
        log_event(logger, "claim", job=JOB, id=self.run_id, owner=lease.owner, fence=lease.fence)
        try:
            with transaction.atomic():
                OnboardingRun.objects.guarded_update(
                    lease,
                    clock=self.clock,
                    expect={"status__in": OnboardingRun.ACTIVE},
                    status=Status.RUNNING,
                    next_attempt_at=None,
                )
                self._mark_crashed(lease)
                self.attempt_id = RunAttempt.objects.create(
                    run_id=self.run_id, fence=lease.fence, owner=lease.owner, started_at=self.clock.now()
                ).pk
        except LeaseLost as lost:
            self.on_lost(lost, "right after the claim")
            return lease
        self.run = OnboardingRun.objects.select_related("supplier").get(pk=self.run_id)
        self.outputs = dict(StepReceipt.objects.filter(run_id=self.run_id).values_list("step", "output"))
        return lease

    def _mark_crashed(self, lease: Lease) -> None:
        # An older attempt still "running" had its lease expire without ending: its worker died or stalled.
        # If it was only stalled, it overwrites this with "blocked" when it wakes up and is refused.
        stale = list(
            RunAttempt.objects.filter(run_id=self.run_id, outcome=Outcome.RUNNING, fence__lt=lease.fence).values_list(
                "pk", "owner", "fence"
            )
        )
        for pk, owner, fence in stale:
            reason = (
                f"Lease expired while this attempt was still running; taken over by {lease.owner} "
                f"at fence {lease.fence}."
            )
            RunAttempt.objects.filter(pk=pk).update(outcome=Outcome.CRASHED, ended_at=self.clock.now(), reason=reason)
            log_event(logger, "crashed", job=JOB, id=self.run_id, owner=owner, fence=fence, reason=reason)

    def remaining_steps(self) -> list[Step]:
        """The steps after the run's phase (the last step whose save landed)."""
        assert self.run is not None
        names = [step.name for step in self.steps]
        if not self.run.phase:
            return list(self.steps)
        if self.run.phase not in names:
            raise PermanentFailure(f"The run is at an unknown phase {self.run.phase!r}.")
        return list(self.steps[names.index(self.run.phase) + 1 :])

    def previous_phase(self, step: Step) -> str:
        index = self.steps.index(step)
        return self.steps[index - 1].name if index else ""

    def budget_left(self) -> float:
        return self.budget - (self.clock.monotonic() - self._started)

    def run_step(self, step: Step) -> dict[str, Any]:
        """Do `step`'s slow part under the heartbeat, then its guarded save, writes and receipt."""
        assert self.lease is not None and self.run is not None
        lease = self.lease
        ctx = StepContext(
            run=self.run,
            supplier=self.run.supplier,
            lease=lease,
            clock=self.clock,
            step=step,
            services=self.services,
            outputs=self.outputs,
        )
        heartbeat = Heartbeat(
            OnboardingRun.objects,
            lease,
            ttl=self.ttl,
            clock=self.clock,
            budget=max(self.budget_left(), 0.0),
            background=self.background,
        )
        self.heartbeats[step.name] = heartbeat
        with heartbeat:
            ctx.heartbeat = heartbeat
            try:
                output = step.work(ctx)
            except StepFailure:
                heartbeat.check()  # a lost lease wins over whatever the work found
                raise
            heartbeat.before_save()
        # The heartbeat has stopped; the renewal just above left the transaction a whole ttl.
        with transaction.atomic():
            OnboardingRun.objects.guarded_update(
                lease,
                clock=self.clock,
                expect={"phase": self.previous_phase(step), "status": Status.RUNNING},
                phase=step.name,
            )
            output = {**output, **(step.commit(ctx, output) or {})}
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
        assert self.lease is not None and self.run is not None
        with transaction.atomic():
            self._guarded_release(
                expect={"phase": self.steps[-1].name, "status": Status.RUNNING},
                status=Status.COMPLETED,
                reason=f"All {len(self.steps)} steps done.",
                finished_at=self.clock.now(),
            )
            self._end_attempt(Outcome.COMPLETED, f"Completed the run at fence {self.lease.fence}.")

    def give_back(self, reason: str, *, requeue: bool, delay: float | None = None) -> None:
        """Release the run as pending for a later attempt (temporary failure or budget spent).

        With `delay` the run is due again that many seconds from the database's now; the due-time watcher
        (`weave.wake`) asks for the next attempt then. The reasons carry that database time.
        """
        with transaction.atomic():
            due = None
            if delay is not None:
                # Read the due time off the database clock first, so the one guarded release writes it and
                # the reason that names it.
                due = (
                    OnboardingRun.objects.filter(pk=self.run_id)
                    .annotate(due=self.clock.now(timedelta(seconds=delay)))
                    .values_list("due", flat=True)
                    .first()
                )
                reason = f"{reason} Next attempt due at {clock_time(due)} (database time)."
            fields: dict[str, Any] = {} if due is None else {"next_attempt_at": due}
            self._guarded_release(expect={"status": Status.RUNNING}, status=Status.PENDING, reason=reason, **fields)
            self._end_attempt(Outcome.RELEASED, reason, retry_due_at=due)
            if requeue:
                transaction.on_commit(partial(queue.enqueue_run, self.run_id))
            if due is not None:
                transaction.on_commit(wake.announce)  # the watchers sleep until the new due time

    def release_for_retry(self, failure: TemporaryFailure, stage: str) -> None:
        """Release the run after a temporary failure, due again after the service's Retry-After or our backoff."""
        if failure.retry_after is not None:
            delay, why = failure.retry_after, "as the service asked with Retry-After"
        else:
            releases = RunAttempt.objects.filter(run_id=self.run_id, outcome=Outcome.RELEASED).count()
            delay = backoff_seconds(
                releases + 1,
                base=weave_settings.ONBOARDING_RELEASE_BACKOFF,
                cap=weave_settings.ONBOARDING_RELEASE_BACKOFF_MAX,
            )
            why = "backoff with jitter"
        self.give_back(
            f"{stage}: {failure.reason} Waiting {delay:.1f} s for a later attempt ({why}).", requeue=False, delay=delay
        )

    def fail(self, reason: str) -> None:
        """End the run as failed with `reason`, under the guard."""
        with transaction.atomic():
            self._guarded_release(
                expect={"status": Status.RUNNING}, status=Status.FAILED, reason=reason, finished_at=self.clock.now()
            )
            self._end_attempt(Outcome.FAILED, reason)

    def on_lost(self, lost: LeaseLost, where: str) -> None:
        """Record our own attempt as blocked (or released, if the run was cancelled) and write nothing else."""
        assert self.lease is not None
        row = OnboardingRun.objects.filter(pk=self.run_id).values("status", "owner", "fence").first()
        if row and row["status"] == Status.CANCELLED:
            if (row["owner"], row["fence"]) == (self.lease.owner, self.lease.fence):
                try:
                    self._guarded_release(expect={"status": Status.CANCELLED})
                except LeaseLost:
                    pass  # our lease ran out meanwhile: there is nothing left to give back
            self._end_attempt(Outcome.RELEASED, f"The run was cancelled; stopped {where} without saving.")
            return
        holder = ""
        current = f"{lost.holder} at fence {lost.holder_fence}"
        if lost.holder is not None and (lost.holder, lost.holder_fence) != (self.lease.owner, self.lease.fence):
            if current not in str(lost):
                holder = f" The run is now held by {current}."
        self._end_attempt(Outcome.BLOCKED, f"Lease lost {where}: {lost}{holder}")

    # --- helpers ------------------------------------------------------------------------------------

    def services(self) -> SupplierServices:
        if self._services is None:
            self._services = SupplierServices()
        return self._services

    def _guarded_release(self, *, expect: dict[str, Any], **fields: Any) -> None:
        assert self.lease is not None
        OnboardingRun.objects.release(self.lease, clock=self.clock, expect=expect, **fields)

    def _end_attempt(self, outcome: str, reason: str, *, retry_due_at: Any = None) -> None:
        assert self.lease is not None
        self.outcome, self.reason = outcome, reason
        if self.attempt_id is None:
            self.attempt_id = RunAttempt.objects.create(
                run_id=self.run_id,
                fence=self.lease.fence,
                owner=self.lease.owner,
                started_at=self.clock.now(),
                ended_at=self.clock.now(),
                outcome=outcome,
                reason=reason,
                retry_due_at=retry_due_at,
            ).pk
        else:
            # Unconditional on purpose: a stalled attempt marked crashed by a newer claim says "blocked" in the end.
            RunAttempt.objects.filter(pk=self.attempt_id).update(
                outcome=outcome, reason=reason, ended_at=self.clock.now(), retry_due_at=retry_due_at
            )
        events: dict[str, str] = {Outcome.COMPLETED: "completed", Outcome.RELEASED: "released"}
        event = events.get(outcome, str(outcome))
        log_event(logger, event, job=JOB, id=self.run_id, owner=self.lease.owner, fence=self.lease.fence, reason=reason)


class AttemptOptions(TypedDict, total=False):
    """The `Attempt` keywords `run_onboarding` passes on (unset or None: the WEAVE setting)."""

    owner: str | None
    ttl: float | None
    budget: float | None
    clock: Clock
    background: bool
    steps: Sequence[Step]
    services: SupplierServices | None


def run_onboarding(run_id: Any, **options: Unpack[AttemptOptions]) -> str:
    """Run one attempt at onboarding run `run_id`; return its outcome (see `Attempt`)."""
    return Attempt(run_id, **options).execute()

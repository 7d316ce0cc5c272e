"""An attempt's records: where a runner writes how one attempt ended, and what the core reads back of it.

Every runner keeps a table of attempts (and one of step receipts). The core's settlement of an
attempt that was cut off from the database or lost its lease (`weave.jobs.cutoff`) needs four
things of it, for the one attempt it is ending: `AttemptRecords`. The core's own are `JobAttempts`,
over `JobAttempt` and `JobStepReceipt`; a runner with tables of its own gives an object with the
same four methods.
"""

from typing import Any, Protocol

from weave.jobs.context import JobContext
from weave.jobs.takeover import guessed_by_a_takeover, own_account
from weave.leases import insert_receipts
from weave.models import JobAttempt, JobState, JobStepReceipt
from weave.sanitize import outside_text


class AttemptRecords(Protocol):
    """The records of one attempt (one lease: a job, an owner, a fence), as the core's settlement uses them.

    Read back on a fresh connection after a cut, never assumed. Every time written is the database's.
    """

    def end(self, outcome: str, reason: str) -> None:
        """Write how this attempt ended (or turn its "running" row into that ending)."""

    def ended(self) -> str | None:
        """The outcome on record if this attempt's ending already landed (a COMMIT whose reply was lost), else None.

        Read first: an ending another worker wrote for this attempt counts too, and is left as it is.
        """

    def landed(self, where: str) -> str:
        """What of this attempt's writes reached the database before it was cut off `where`, in words
        for its reason: whether its claim's first write, or its current step's save at this fence, landed."""

    def owner_at(self, fence: int) -> str | None:
        """The owner of this job's attempt at `fence`: who took the job over, named once their lease is gone."""


class JobAttempts:
    """The core's records of attempt `ctx` (started at `started`): its `JobAttempt` row and step receipts."""

    def __init__(self, ctx: JobContext, started: Any) -> None:
        self.ctx = ctx
        self.started = started

    def _attempts(self) -> Any:
        return JobAttempt.objects.filter(job_type=self.ctx.job_type, job_id=str(self.ctx.lease.pk))

    def end(self, outcome: str, reason: str) -> None:
        # A takeover's guess stands only for an attempt that was taken over, which ends `blocked`: then its
        # own account replaces the guess rather than adding a second record.
        if outcome != JobAttempt.Outcome.BLOCKED or not own_account(self.ctx, reason):
            row = attempt_row(self.ctx, self.started, outcome, reason)
            if outcome == JobAttempt.Outcome.RETRY:  # given back due at once (a cut-off): due as it ended
                row["retry_at"] = row["finished_at"]
            insert_receipts(JobAttempt, [row])

    def ended(self) -> str | None:
        """The outcome this attempt recorded itself (a takeover's guess that its worker died is not one)."""
        mine = self._attempts().filter(fence=self.ctx.lease.fence).exclude(guessed_by_a_takeover())
        outcome: str | None = mine.values_list("outcome", flat=True).first()
        return outcome

    def landed(self, where: str) -> str:
        ctx = self.ctx
        if where == "at the claim":
            return "the claim had landed, only its reply was lost"
        if where == "at the finish":
            return "nothing of the finish landed"
        if not where.startswith("at step"):
            return "none of its steps had saved anything yet"
        receipts = JobStepReceipt.objects.filter(job_type=ctx.job_type, job_id=str(ctx.lease.pk), step=ctx.step)
        if ctx.guard.get("state") == JobState.UNDOING:  # an undo attempt: its writes are the undone marks
            undone = receipts.filter(undone_fence=ctx.lease.fence).exists()
            return f"the undo of step {ctx.step} had landed" if undone else f"nothing of step {ctx.step}'s undo landed"
        saved = receipts.filter(fence=ctx.lease.fence).exists()
        return f"the save of step {ctx.step} had landed" if saved else f"nothing of step {ctx.step}'s save landed"

    def owner_at(self, fence: int) -> str | None:
        owner: str | None = self._attempts().filter(fence=fence).values_list("owner", flat=True).first()
        return owner


def attempt_row(ctx: JobContext, started: Any, outcome: str, reason: str, **extra: Any) -> dict[str, Any]:
    """The `JobAttempt` row of attempt `ctx` ending with `outcome` (finished now, by the database clock)."""
    return {
        "job_type": ctx.job_type,
        "job_id": str(ctx.lease.pk),
        "number": ctx.attempt,
        "owner": ctx.lease.owner,
        "fence": ctx.lease.fence,
        "outcome": outcome,
        "reason": outside_text(reason, limit=2000),
        "error_class": extra.get("error_class", ""),
        "traceback": extra.get("traceback", ""),
        "result": extra.get("result"),
        "started_at": started,
        "finished_at": ctx.clock.now(),
        "retry_at": None,  # a retry's due time, as its finish stored it on the job's row (`Ending.receipt`)
    }


def released_row(ctx: JobContext, reason: str) -> dict[str, Any]:
    """The `released` record of claim `ctx`, given back before it started (for `reason`), now by the database clock.

    Numbered as the claim counted it: the give-back takes that attempt back, so the next claim reuses the number.
    """
    claimed = ctx.claimed_at if ctx.claimed_at is not None else ctx.clock.now()
    return attempt_row(ctx, claimed, JobAttempt.Outcome.RELEASED, reason)

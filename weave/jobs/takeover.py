"""A takeover records the attempt it replaced, when that attempt's worker died without a finish.

A claim counts an attempt as it starts; the attempt's `JobAttempt` record is written when it ends. A
worker killed mid-attempt writes nothing more: its lease lapses and the next claim takes the job over.
That claim copies who held the row (`previous_owner`, `previous_fence`, `previous_expires_at`,
`previous_attempted_at` on `weave.models.JobModel`) in its own statement, so the attempt that took
over writes the dead attempt's record, as `blocked` (as tasks record theirs), in database time: it
started at its own claim, and its end is dated when the takeover found it, its reason saying it ended
no later than its lease's expiry. Dated at the takeover, not the expiry, because the metrics' running
totals keep only rows that end after their last checkpoint: a row dated in the past could be missed.
The dashboard's counts, the metrics, the admin and `weave_explain` then see it like any other ending.
"""

from typing import Any

from django.db.models import Case, DateTimeField, F, Q, When

from weave.jobs.context import JobContext
from weave.leases import insert_receipts
from weave.models import JobAttempt
from weave.sanitize import outside_text
from weave.telemetry import COUNT_LAG
from weave.timeline import clock_time

# How a takeover's record of another worker's attempt begins: that worker may only have stalled, and
# if it wakes up it puts its own account in place of this guess (`own_account`).
NO_FINISH = "No finish: its worker stopped, crashed or stalled while holding the job."
# The same guess as older versions worded it, still recognised in the records they wrote.
NO_FINISH_BEFORE = "No finish: its worker stopped or crashed while holding the job."
# How a task's takeover (`weave.tasks.worker`) begins its record of the same guess, which names the lapse.
TASK_NO_FINISH = "Lease lapsed at"


def record_takeover(ctx: JobContext) -> bool:
    """Record the attempt this claim took the job over from, unless it has a record; return whether one was written.

    Nothing is written for a job that was free at the claim, nor for one claimed before Weave copied
    the claim's time (no truthful start to give): `weave_explain` keeps its "no end" line for those.
    """
    row = ctx.job
    lost = lost_attempt_row(ctx, row)
    if lost is None:
        return False
    done = JobAttempt.objects.filter(
        job_type=ctx.job_type, job_id=str(ctx.lease.pk), number=lost["number"], fence=lost["fence"]
    )
    if done.exists():  # it recorded its own ending (a stalled worker that woke up), or a takeover did
        return False
    insert_receipts(JobAttempt, [lost])
    return True


def took_over(row: Any) -> bool:
    """Whether the claim that read `row` took it over from a holder whose lease had lapsed (no finish of its own).

    A finish, a give-back and a release all free the row, so a claim finds an owner only on a lapsed lease.
    """
    # getattr: a core-run model that is no `JobModel` keeps no previous holder.
    return getattr(row, "previous_owner", None) is not None


def lost_attempt_row(ctx: JobContext, row: Any) -> dict[str, Any] | None:
    """The `JobAttempt` row of the attempt `row`'s latest claim took over (None: it took no attempt over)."""
    # getattr: a core-run model that is no `JobModel` keeps no previous holder.
    owner, fence = getattr(row, "previous_owner", None), getattr(row, "previous_fence", None)
    began, lapsed = getattr(row, "previous_attempted_at", None), getattr(row, "previous_expires_at", None)
    if owner is None or fence is None or began is None or lapsed is None:
        return None
    reason = (
        f"{NO_FINISH} It ended no later than its lease's "
        f"expiry at {clock_time(lapsed)} (database time); recorded when {ctx.lease.owner} took the job over "
        f"at fence {ctx.lease.fence}."
    )
    return {
        "job_type": ctx.job_type,
        "job_id": str(ctx.lease.pk),
        "number": ctx.attempt - 1,
        "owner": owner,
        "fence": fence,
        "outcome": JobAttempt.Outcome.BLOCKED,
        "reason": reason,
        "error_class": "",
        "traceback": "",
        "result": None,
        "started_at": began,
        "finished_at": ctx.clock.now(),
    }


def guessed_by_a_takeover() -> Q:
    """The `JobAttempt` records a takeover wrote for an attempt whose worker it took for dead."""
    guessed = Q(reason__startswith=NO_FINISH) | Q(reason__startswith=NO_FINISH_BEFORE)
    guessed |= Q(reason__startswith=TASK_NO_FINISH)
    return Q(outcome=JobAttempt.Outcome.BLOCKED) & guessed


def own_account(ctx: JobContext, reason: str) -> bool:
    """Put attempt `ctx`'s own account of its lost lease in place of a takeover's guess that its worker died.

    Return whether there was such a guess. The worker was alive after all: it says where it lost the
    lease and who holds the job now, and its end moves to now, by the database clock. Only while the
    guess is younger than the metrics' lag, though: an older one may be in their kept totals already,
    and moving it past them would count it twice (its time then stays the takeover's).
    """
    guessed = JobAttempt.objects.filter(
        guessed_by_a_takeover(),
        job_type=ctx.job_type,
        job_id=str(ctx.lease.pk),
        number=ctx.attempt,
        fence=ctx.lease.fence,
    )
    now = ctx.clock.now()
    young = When(finished_at__gt=ctx.clock.now(-COUNT_LAG), then=now)
    ended = Case(young, default=F("finished_at"), output_field=DateTimeField())
    return bool(guessed.update(reason=outside_text(reason, limit=2000), finished_at=ended))

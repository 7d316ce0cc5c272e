"""Cancel and undo for a core-run job type: the undo walk of a job's saved steps, and the hand-on to it.

A job cancelled with its undo asked for is in state `undoing` (`weave.jobs.services.job_cancel(undo=True)`).
The next attempt claims it as any due job (fence bumped by the database clock) and, instead of its
steps, undoes each saved step newest first: the receipts of the job's current epoch not yet undone.
A step's `undo_run(ctx, result)`, if declared, makes the undo's outside calls first, outside any
transaction; then its `undo(ctx, value)` runs in its own guarded transaction, which expects the job
still `undoing` and marks that receipt `undone_at` (database time) and `undone_fence`. Receipts are never
deleted: the job's story keeps what was saved and what was undone.

An attempt that was running the job's steps when the undo was asked finds its next save refused (the
guard expects `pending`). If it still holds the lease it gives the job straight back for the undo,
records itself `cancelled`, and writes nothing else.
"""

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import DatabaseError, router, transaction

from weave.jobs import queue
from weave.jobs.context import JobContext
from weave.jobs.declaration import JobType
from weave.jobs.records import attempt_row
from weave.jobs.steps import Step, UndoWalk, undo_steps
from weave.leases import LeaseLost, insert_receipts
from weave.models import JobAttempt, JobState, JobStepReceipt
from weave.worker_db import is_cut_off

UNDOING = {"state": JobState.UNDOING}
RUNNING = {"state": JobState.PENDING}


class UndoFailed(Exception):  # noqa: N818  (the wrapper of one undo's own error: the walk stops at it)
    """A step's undo raised `error`; its transaction was rolled back, the receipt stays not undone."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def undo_saved(jt: JobType, ctx: JobContext) -> UndoWalk:
    """Undo the saved steps of attempt `ctx`'s job, newest first, each in its own guarded transaction.

    A lost lease raises `LeaseLost` and a cut-off connection its `DatabaseError` (nothing more is
    written either way); an undo's own error stops the walk (`stopped == "failed"`, `error` an `UndoFailed`).
    """
    ctx.guard = dict(UNDOING)
    saved = list(
        JobStepReceipt.objects.filter(
            job_type=jt.name, job_id=str(ctx.lease.pk), epoch=ctx.epoch, undone_at__isnull=True
        ).order_by("-finished_at", "-pk")
    )
    ctx.results = {receipt.step: receipt.result for receipt in reversed(saved)}
    return undo_steps(
        jt.plan(),
        saved,
        partial(_undo_one, ctx),
        name_of=lambda receipt: str(receipt.step),
        budget_left=partial(_budget_left, ctx),
        failures=(UndoFailed,),
    )


def _budget_left(ctx: JobContext) -> float:
    left = ctx.budget_left()
    return math.inf if left is None else left


def _undo_one(ctx: JobContext, step: Step, receipt: JobStepReceipt) -> None:
    """One step's undo: its slow part (`undo_run`) outside any transaction, then the guarded update (the job
    still `undoing`, the lease ours), the step's compensating writes and the receipt's undone mark, in one
    transaction; the undo's own error rolls all of it back."""
    undo: Callable[[Any, Any], None] | None = step.undo
    ctx.step = step.name
    try:
        # Outside calls run before the transaction opens: one inside it would hold the job's row lock for
        # the call, and past the worker's idle-in-transaction limit its session is cut at every attempt.
        value = step.undo_value(ctx, receipt.result)
        with ctx.guarded():
            if undo is not None:
                undo(ctx, value)
            JobStepReceipt.objects.filter(pk=receipt.pk, undone_at__isnull=True).update(
                undone_at=ctx.clock.now(), undone_fence=ctx.lease.fence
            )
    except LeaseLost:
        raise
    except DatabaseError as error:
        if is_cut_off(error):
            raise
        raise UndoFailed(error) from error
    except Exception as error:  # noqa: BLE001  (the undo's own failure: classified by the retry policy)
        raise UndoFailed(error) from error


def undo_tries(ctx: JobContext) -> int:
    """Which try at the failing undo this is: 1 + the undo attempts since the undo was asked that failed.

    The job's attempt counter also counts the attempts at its steps; the retry policy of an undo counts
    only the undo's own failures (a spent budget is no failure).
    """
    tries = 1
    # A claim given back unstarted is no try (its record has no result): it does not end the count.
    records = (
        JobAttempt.objects.ran().filter(job_type=ctx.job_type, job_id=str(ctx.lease.pk)).order_by("-number", "-pk")
    )
    for result in records.values_list("result", flat=True)[:100]:
        undo = result.get("undo") if isinstance(result, dict) else None
        if not isinstance(undo, dict):
            break
        tries += 1 if undo.get("failed") else 0
    return tries


def hand_on(ctx: JobContext, started: Any, where: str) -> bool:
    """Give the job back for its undo if attempt `ctx` (running its steps) was refused only because an undo
    was asked meanwhile, and record the attempt `cancelled`; False when the lease is not ours any more."""
    if ctx.guard != RUNNING:
        return False
    reason = (
        f"The job was cancelled and its undo asked while this attempt ran: it stopped {where} without "
        "saving and gave the job back for the undo."
    )
    try:
        with transaction.atomic(using=router.db_for_write(ctx.model)):
            ctx.rows.release(ctx.lease, clock=ctx.clock, expect=UNDOING)
            insert_receipts(JobAttempt, [attempt_row(ctx, started, JobAttempt.Outcome.CANCELLED, reason)])
            transaction.on_commit(partial(queue.enqueue_job, ctx.job_type, ctx.lease.pk))
    except LeaseLost:
        return False
    return True


def names(steps: list[str]) -> str:
    """Step names for a reason: "book, quote", or "none"."""
    return ", ".join(steps) or "none"

"""What a person (or the site) may do to a core-run job: start it now, retry it, cancel it (and undo it).

Each is one guarded statement per job: a job held under a live lease is reported busy and left alone,
except by a cancel-and-undo, which the holder's next save gives way to (see `job_cancel`).
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F

from weave.jobs import queue
from weave.jobs.declaration import get
from weave.leases import Clock, LeaseBusy, NotClaimable, default_clock
from weave.models import JobState

__all__ = ["ActionReport", "job_cancel", "job_retry", "job_start"]


@dataclass
class ActionReport:
    """Which jobs an action changed, which were busy (a live lease holds them), which it could not apply to."""

    changed: list[Any] = field(default_factory=list)
    busy: list[Any] = field(default_factory=list)
    skipped: list[Any] = field(default_factory=list)


def job_start(*, job_type: str, pks: Iterable[Any]) -> ActionReport:
    """Ask for an attempt now at each pending job (a retry's wait is cut short: it is due at once)."""
    model: Any = get(job_type).model
    report = ActionReport()
    for pk in pks:
        made_due = model.objects.pending().free_or_expired().filter(pk=pk).update(next_attempt_at=None)
        if made_due:
            _enqueue_on_commit(job_type, pk)
            report.changed.append(pk)
        elif model.objects.pending().filter(pk=pk).exists():
            report.busy.append(pk)
        else:
            report.skipped.append(pk)
    return report


def job_retry(*, job_type: str, pks: Iterable[Any], clock: Clock = default_clock) -> ActionReport:
    """Start a failed or cancelled job over: a new epoch (its steps and idempotency keys afresh), due now."""
    model: Any = get(job_type).model
    ended = model.objects.filter(state__in=[JobState.FAILED, JobState.CANCELLED])
    fields = {"state": JobState.PENDING, "epoch": F("epoch") + 1, "next_attempt_at": None, "finished_at": None}
    return _reopen(job_type, ended, pks, clock, fields, enqueue=True)


def job_cancel(*, job_type: str, pks: Iterable[Any], undo: bool = False, clock: Clock = default_clock) -> ActionReport:
    """Cancel pending jobs nobody holds; the new fence refuses any late write of an earlier attempt.

    `undo=True` also asks for the undo of each job's saved steps (the step receipts of its current
    epoch, newest first, each step's `undo`): the job goes to `undoing` and the next attempt claims it
    under a new fence and runs them, then leaves it `cancelled`. It applies to pending jobs, held or
    not (a holder's next save expects `pending` and is refused; it gives the job back for the undo),
    and to failed and cancelled ones (steps already undone are not undone again). A job type none of
    whose steps declares an undo raises `ValueError`.
    """
    declared = get(job_type)
    model: Any = declared.model
    if undo:
        if not declared.undoable:
            raise ValueError(f"Job type {job_type!r} declares no step with an undo; cancel without undo=True.")
        return _ask_undo(job_type, model, pks)
    fields = {"state": JobState.CANCELLED, "finished_at": clock.now(), "next_attempt_at": None}
    return _reopen(job_type, model.objects.pending(), pks, clock, fields, enqueue=False)


def _ask_undo(job_type: str, model: Any, pks: Iterable[Any]) -> ActionReport:
    # State only, never the lease: a holder is stopped by the state its next guarded write expects,
    # and the claim that runs the undo bumps the fence as every claim does.
    report = ActionReport()
    asked = [JobState.PENDING, JobState.FAILED, JobState.CANCELLED]
    fields = {"state": JobState.UNDOING, "next_attempt_at": None, "finished_at": None}
    for pk in pks:
        if model.objects.filter(pk=pk, state__in=asked).update(**fields):
            report.changed.append(pk)
            _enqueue_on_commit(job_type, pk)
        else:
            report.skipped.append(pk)
    return report


def _reopen(
    job_type: str, rows: Any, pks: Iterable[Any], clock: Clock, fields: dict[str, Any], *, enqueue: bool
) -> ActionReport:
    report = ActionReport()
    for pk in pks:
        try:
            rows.reopen(pk, clock=clock, **fields)
        except LeaseBusy:
            report.busy.append(pk)
            continue
        except NotClaimable:
            report.skipped.append(pk)
            continue
        report.changed.append(pk)
        if enqueue:
            _enqueue_on_commit(job_type, pk)
    return report


def _enqueue_on_commit(job_type: str, pk: Any) -> None:
    transaction.on_commit(lambda: queue.enqueue_job(job_type, pk))

"""The story of one job of a core-run job type: its attempts, step receipts, what people did and who holds it now.

A job whose row was deleted keeps its attempt records and receipts (they name the job by type and id, not by a
foreign key): its story is told from them, and says plainly that the row is gone.
"""

from collections.abc import Callable
from typing import Any

from weave.leases import Clock, default_clock
from weave.models import RUNNABLE_STATES, JobAttempt, JobState, JobStepReceipt, attempts_that_ran
from weave.timeline import Timeline, add_operator_events, clock_time, stamp
from weave.wording import how_many


def explain_job(job_type: str, model: Any, pk: Any, *, clock: Clock = default_clock) -> Timeline:
    """Return the timeline of job `pk` of `job_type`, ending with a plain-language summary.

    Raises `model.DoesNotExist` only when neither the row nor any record of it is left.
    """
    attempts = list(JobAttempt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("number", "pk"))
    receipts = list(JobStepReceipt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("finished_at", "pk"))
    job = model.objects.with_lease_state(clock).filter(pk=pk).first()
    if job is None:
        if not attempts and not receipts:
            raise model.DoesNotExist(f"No {job_type} with id {pk}, and no attempt record of one.")
        return _explain_gone(job_type, model, pk, attempts, receipts)
    ran = attempts_that_ran(attempts)
    t = Timeline(f"{job_type} {pk}: {job.state}, {attempt_count(job, ran)}")
    t.add(job.created_at, "created", f"{job_type} {pk}")
    _add_unrecorded(t, job, attempts)  # first: at the takeover's instant it comes before the claim
    _add_records(t, attempts, receipts, waiting=_waiting_retry(job, ran))
    _add_open_claim(t, job, attempts)
    add_operator_events(t, model, pk)
    t.add(None, "holder", _holder(job))
    t.summary = _summary(job, ran) + _given_back(attempts) + _undo_said(job, receipts)
    return t


def _add_records(
    t: Timeline,
    attempts: list[JobAttempt],
    receipts: list[JobStepReceipt],
    waiting: tuple[JobAttempt, str] | None = None,
) -> None:
    """A claim line and an ending line per attempt record, a line per receipt and its undo. A retry's line says
    when its next try was due (its record's `retry_at`); for a record without one (kept before it was), `waiting`:
    the retry the job waits on and when its next try is due (`_waiting_retry`), said on that retry's line."""
    for a in attempts:
        if a.outcome == JobAttempt.Outcome.RELEASED:
            # A claim given back before it started: its fence is accounted for, but it was no attempt.
            t.add(a.started_at, "claim", f"fence {a.fence} claimed by {a.owner} (not started)")
            t.add(a.finished_at, a.outcome, f"fence {a.fence}: {a.reason}")
            continue
        t.add(a.started_at, "claim", f"attempt {a.number}: fence {a.fence} claimed by {a.owner}")
        said = f"attempt {a.number} (fence {a.fence}): {a.reason}".rstrip(": ")
        if a.retry_at is not None:
            said = f"{said.rstrip('.')}. Next try due {clock_time(a.retry_at)} (database time)."
        elif waiting is not None and waiting[0] is a:
            said = f"{said.rstrip('.')}. {waiting[1]}"
        t.add(a.finished_at, a.outcome, said)
    for r in receipts:
        t.add(r.finished_at, "receipt", f"step {r.step} saved by fence {r.fence} ({r.owner}), key {r.idempotency_key}")
        if r.undone_at is not None:
            t.add(r.undone_at, "undone", f"step {r.step} (saved by fence {r.fence}) undone by fence {r.undone_fence}")


def _add_open_claim(t: Timeline, job: Any, attempts: list[JobAttempt]) -> None:
    """Give its claim line to the attempt holding the job now, or holding it until its lease lapsed.

    Its record is written only when it ends, but the claim copied its database time into the row
    (`last_attempted_at`), so the story shows when it began instead of leaving it out.
    """
    claimed_at = _open_claim_time(job, attempts)
    if claimed_at is not None:
        t.add(claimed_at, "claim", f"attempt {job.attempts}: fence {job.fence} claimed by {job.owner}")


def _waiting_retry(job: Any, ran: list[JobAttempt]) -> tuple[JobAttempt, str] | None:
    """The retry the job waits on now, and when its next try is due (the row's due time, database clock).

    The row keeps the due time of its newest retry only until the next claim: so it is said of the newest
    attempt when that ended `retry`, nothing claimed the job since, and the job is still to run.
    """
    newest = ran[-1] if ran else None
    if newest is None or newest.outcome != JobAttempt.Outcome.RETRY:
        return None
    if job.state not in RUNNABLE_STATES or job.owner is not None or job.attempts != newest.number:
        return None
    due = job.next_attempt_at
    return newest, ("Next try due at once." if due is None else f"Next try due {clock_time(due)} (database time).")


def _open_claim_time(job: Any, attempts: list[JobAttempt]) -> Any:
    """The database time of the claim behind the row's lease, when that attempt has no record yet (else None)."""
    # getattr: a core-run model that is no `JobModel` keeps no claim time.
    claimed_at = getattr(job, "last_attempted_at", None)
    if job.owner is None or claimed_at is None or any(a.fence == job.fence for a in attempts):
        return None
    return claimed_at


def _add_unrecorded(t: Timeline, job: Any, attempts: list[JobAttempt]) -> None:
    """Give a line to each attempt that recorded no end (its worker died while holding the job).

    A claim counts an attempt; its record is written only when it ends, so a killed worker leaves a
    gap in the numbers. The line stands where the next recorded claim took the job over (by the
    database clock), be it one given back unstarted; the attempt still holding the job, or one nothing
    claimed after, is the holder's line.
    """
    recorded = {a.number for a in attempts_that_ran(attempts)}
    holding = _holding(job)
    for number in range(1, max(job.attempts, max(recorded, default=0)) + 1):
        after = next((a for a in attempts if a.number > number), None)
        if number in recorded:
            continue
        if after is not None:
            took = (
                f"the claim at fence {after.fence} by {after.owner} took it over (and gave it back unstarted)"
                if after.outcome == JobAttempt.Outcome.RELEASED
                else f"attempt {after.number} took it over at fence {after.fence}"
            )
            t.add(
                after.started_at,
                "no end",
                f"attempt {number}: no end recorded: its worker stopped while holding the job, whose lease "
                f"then lapsed; {took}",
            )
        elif holding and number < job.attempts:
            # The taking-over attempt is still running and has no record yet: the line stands at its
            # claim (the row's claim time), or with the holder's line when the row has none.
            t.add(
                _open_claim_time(job, attempts),
                "no end",
                f"attempt {number}: no end recorded: its worker stopped while holding the job, whose lease "
                f"then lapsed; attempt {job.attempts}, running now, took it over at fence {job.fence}",
            )


def _explain_gone(
    job_type: str, model: Any, pk: Any, attempts: list[JobAttempt], receipts: list[JobStepReceipt]
) -> Timeline:
    """The story of a job whose row is gone, from the attempt records and receipts left of it."""
    ran = attempts_that_ran(attempts)
    t = Timeline(f"{job_type} {pk}: the job row is gone, {how_many(len(ran), 'attempt record{}')}")
    _add_records(t, attempts, receipts)
    deleted = [e for e in add_operator_events(t, model, pk) if e.action == "deleted"]
    t.add(None, "holder", "nobody: the job row is gone")
    last = max([a.finished_at for a in attempts] + [r.finished_at for r in receipts])
    by = f" {deleted[-1].who} deleted it in the admin at {stamp(deleted[-1].at)}." if deleted else ""
    gone = (
        f"The job row is gone (deleted); its last attempt record is from {stamp(last)} (database time), "
        f"and this story is told from the records left of it.{by}"
    )
    if not ran:
        left = f"{how_many(len(receipts), 'step receipt{}')} {'is' if len(receipts) == 1 else 'are'} left"
        t.summary = f"{gone} No attempt ended; {left}.{_given_back(attempts)}"
        return t
    recorded = f"{how_many(len(ran), 'attempt{}')} recorded"
    t.summary = f"{gone} {recorded}; {_newest_ended(ran)}{_lost(ran)}{_given_back(attempts)}"
    return t


def attempt_count(job: Any, ended: list[JobAttempt]) -> str:
    """The attempts so far, said the same way in the title and the summary: "2 attempts: 1 ended, 1 running".

    A claim counts an attempt as it starts; its history row is written when it ends. The difference is an
    attempt still running (under a live lease) or one whose worker stopped without ending it.
    """
    started = max(job.attempts, len(ended))
    open_ = started - len(ended)
    if not open_:
        return how_many(started, "attempt{}")
    # One lease, one holder: at most one open attempt is running; any other one's worker stopped
    # (a killed worker's attempt stays open once the next claim took the job over).
    running = 1 if _holding(job) else 0
    # The holder's lease ran out and nobody took the job over yet: its worker died, or only stalled and may
    # still end the attempt itself (its late writes refused), so it is not said to have stopped.
    lapsed = 1 if open_ > running and job.owner is not None and not job.lease_live else 0
    stopped = open_ - running - lapsed
    said = [f"{len(ended)} ended"]
    said += [f"{running} running"] if running else []
    said += [f"{lapsed} not ended, its lease expired (its worker died or stalled)"] if lapsed else []
    said += [f"{stopped} never ended (its worker stopped)"] if stopped else []
    return f"{how_many(started, 'attempt{}')}: {', '.join(said)}"


def _holding(job: Any) -> bool:
    """Whether a worker holds the job under a live lease right now (by the database clock)."""
    return job.owner is not None and bool(job.lease_live)


def _holder(job: Any) -> str:
    if job.owner is None:
        return f"nobody holds it (fence {job.fence}); state {job.state}"
    state = "live until" if job.lease_live else "expired at"
    return f"{job.owner} at fence {job.fence}, lease {state} {clock_time(job.lease_expires_at)}"


def _newest_ended(attempts: list[JobAttempt]) -> str:
    """How the newest attempt with a record ended (the highest-numbered: the one whose claim came last).

    An older attempt can end after a newer one (a stalled worker records its lost lease late), but the
    newest claim is the one that decided the job's state, so that is the attempt an operator is told of.
    """
    newest = attempts[-1]
    reason = newest.reason.rstrip(".") or ("" if newest.outcome == JobAttempt.Outcome.DONE else "no reason given")
    said = f"the newest attempt that ended, attempt {newest.number}, ended {newest.outcome}"
    return f"{said}{': ' if reason else ''}{reason}."


def _given_back(records: list[JobAttempt]) -> str:
    """How many claims were given back unstarted (not attempts: the fences they took are accounted for)."""
    released = [a for a in records if a.outcome == JobAttempt.Outcome.RELEASED]
    if not released:
        return ""
    fences = ", ".join(str(a.fence) for a in released)
    fence = "fences" if len(released) > 1 else "fence"
    return f" {how_many(len(released), 'claim{}')} given back unstarted, not counted as attempts ({fence} {fences})."


def _lost(attempts: list[JobAttempt]) -> str:
    blocked = sum(1 for a in attempts if a.outcome == JobAttempt.Outcome.BLOCKED)
    lost = "lost its lease and wrote" if blocked == 1 else "lost their lease and wrote"
    return f" {how_many(blocked, 'attempt{}')} {lost} nothing after it." if blocked else ""


def _undo_said(job: Any, receipts: list[JobStepReceipt]) -> str:
    """What of the job's saved steps an undo asked for has undone (database time, fence), and what is left."""
    mine = [r for r in receipts if r.epoch == job.epoch]
    # In the order they were undone: by time, then newest receipt first (the walk's order).
    undone = sorted((r for r in mine if r.undone_at is not None), key=lambda r: (r.undone_at, -r.pk))
    if job.state != JobState.UNDOING and not undone:
        return ""
    said = ", ".join(f"{r.step} at {stamp(r.undone_at)} by fence {r.undone_fence}" for r in undone)
    left = [r.step for r in mine if r.undone_at is None]
    waiting = " The undo of its saved steps is asked and not finished." if job.state == JobState.UNDOING else ""
    return f"{waiting} Steps undone: {said or 'none yet'}; saved and not undone: {', '.join(left) or 'none'}."


def _summary(job: Any, attempts: list[JobAttempt]) -> str:
    count = attempt_count(job, attempts)
    running = f" {job.owner} holds it under fence {job.fence} now." if job.owner is not None and job.lease_live else ""
    if not attempts:
        ended = "no attempt has ended yet" if job.state == "pending" else "no attempt ended"
        return f"{count}; {ended}; it is {job.state}.{running}"
    when = (
        f" Next attempt due at {clock_time(job.next_attempt_at)}."
        if job.state in RUNNABLE_STATES and job.next_attempt_at
        else ""
    )
    return f"{count}; {_newest_ended(attempts)}{_lost(attempts)}{when}{running}"


def explainer_for(job_type: str, model: Any) -> Callable[[int], Timeline]:
    """The `weave_explain <job_type> <id>` function of a core-run job type."""
    return lambda pk: explain_job(job_type, model, pk)

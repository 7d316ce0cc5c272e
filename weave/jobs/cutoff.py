"""End one's own attempt truthfully: after a cut from the database, or a lease lost under it.

A cut (a network partition, a server-side session timeout, a killed connection) leaves a worker
not knowing what reached the database: the server aborts the open transaction, but a COMMIT may
have landed with only its reply lost. So the worker never assumes: on a fresh connection it reads
back whether its claim, its step's save or its ending landed, and then writes one thing, its own
attempt's ending, naming where it was cut off. A lease still ours is given back in one guarded
statement with that ending; a lease lost meanwhile is never written under.

This module is the one place that knows how such an attempt settles. Each runner brings its
attempt's records (`weave.jobs.records.AttemptRecords`) and its own way of giving the job back; the
core runner (single attempts and each row of a batch drain) and the onboarding runner both settle here.
"""

import logging
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connections, router, transaction

from weave.jobs.context import JobContext
from weave.jobs.records import AttemptRecords
from weave.leases import Clock, Lease, LeaseLost

logger = logging.getLogger("weave.jobs")

CUT_OFF = "cut off"  # what a runner returns when its claim never landed: nothing of the attempt exists
BLOCKED = "blocked"  # the outcome of an attempt that lost its lease, in every runner's records

# Gives the job back under the attempt's lease, inside the settlement's transaction (raising `LeaseLost`
# when the lease is no longer live and ours), and returns the outcome to record and the words that end
# its reason ("Gave the job back.").
GiveBack = Callable[[str], tuple[str, str]]


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (a driver's message runs on), else its class name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _reconnect(model: Any) -> None:
    """Drop the broken connection `model` writes through; the next query opens a fresh one."""
    connections[router.db_for_write(model)].close()


def landed_claim(
    job_type: str,
    rows: Any,
    pk: Any,
    owner: str,
    cut: DatabaseError,
    *,
    ttl: float,
    clock: Clock,
    attempt_field: str | None = None,
) -> JobContext | None:
    """Read back, on a fresh connection, whether a claim by `owner` of `pk` among `rows` (any row, if
    `pk` is None) landed with only its reply cut off: its attempt's context if so, else None (logged).

    The owner is new for every attempt, so a row naming it is our claim. `attempt_field`: the row's
    attempt counter, if it keeps one, for the context's `attempt`.
    """
    model = rows.model
    _reconnect(model)
    mine = model._default_manager.filter(owner=owner)
    fields = ("pk", "fence", attempt_field) if attempt_field else ("pk", "fence")
    found = (mine if pk is None else mine.filter(pk=pk)).values(*fields).first()
    if found is None:
        logger.warning(
            "event=cut_off job_type=%s id=%s owner=%s where=claim reason=%s", job_type, pk, owner, first_line(cut)
        )
        return None
    lease = Lease(pk=found["pk"], owner=owner, fence=found["fence"])
    attempt = found[attempt_field] if attempt_field else 0
    return JobContext(job_type, None, lease, attempt, 0, float(ttl), clock, job_model=model)


def settle_cut_off(
    ctx: JobContext,
    records: AttemptRecords,
    cut: DatabaseError,
    where: str,
    give_back: GiveBack,
    *,
    reason: str = "",
    lost_words: Callable[[LeaseLost], str] | None = None,
) -> str | None:
    """End attempt `ctx`, cut off `where` ("at step book", "at the finish"), truthfully; return its outcome.

    On a fresh connection: an ending already on record (a finish whose reply was lost) is left as it
    is and None is returned. Otherwise the reason (unless given) says where the link failed, the
    driver's words and what `records` read back. `give_back` returns the job under our lease in one
    transaction with the ending it names. If the lease was lost meanwhile, only a `blocked` ending
    is written, naming who took the job over, else `lost_words(lost)` (by default where it was lost).
    """
    logger.warning(
        "event=cut_off job_type=%s id=%s fence=%s where=%r reason=%s",
        ctx.job_type,
        ctx.lease.pk,
        ctx.lease.fence,
        where,
        first_line(cut),
    )
    _reconnect(ctx.model)
    if records.ended() is not None:
        return None
    reason = reason or f"Cut off from the database {where} ({first_line(cut)}); {records.landed(where)}."
    try:
        with transaction.atomic(using=router.db_for_write(ctx.model)):
            outcome, words = give_back(reason)
            records.end(outcome, f"{reason} {words}")
        return outcome
    except LeaseLost as lost:
        said = _taken_over(ctx, records) or (lost_words(lost) if lost_words else ctx.blocked_reason(lost, "meanwhile"))
        records.end(BLOCKED, f"{reason} {said}")
        return BLOCKED


def record_blocked(ctx: JobContext, records: AttemptRecords, lost: LeaseLost, where: str, *, noun: str = "job") -> None:
    """Record attempt `ctx` as blocked by `lost` `where`, and nothing else (unless its ending is already on
    record: the worker that took the job over may have written it)."""
    # Our own history, not the job's row: the attempt says it lost the lease, to whom, and stops.
    if records.ended() is not None:
        return
    records.end(BLOCKED, ctx.blocked_reason(lost, where, noun=noun))
    logger.warning(
        "event=lease_lost job_type=%s id=%s fence=%s reason=%s", ctx.job_type, ctx.lease.pk, ctx.lease.fence, lost
    )


def _taken_over(ctx: JobContext, records: AttemptRecords) -> str | None:
    """Say "Taken over meanwhile by worker-b at fence 2." when the row's fence moved past ours, else None.

    The job may be finished and free by now: then its records name the owner of the attempt at that fence."""
    row = ctx.rows.filter(pk=ctx.lease.pk).values("owner", "fence").first()
    if row is None or row["fence"] == ctx.lease.fence:
        return None
    taker = row["owner"] or records.owner_at(row["fence"])
    holder = f"{taker} at fence {row['fence']}" if taker else f"fence {row['fence']}"
    return f"Taken over meanwhile by {holder}."

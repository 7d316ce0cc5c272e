"""A worker cut off from the database mid-attempt: read back what landed, and end its own attempt only.

A cut (a network partition, a server-side session timeout, a killed connection) leaves a worker
not knowing what reached the database: the server aborts the open transaction, but a COMMIT may
have landed with only its reply lost. So the worker never assumes: on a fresh connection it reads
back whether its claim, its step's save or its finish landed, and then writes one thing, its own
attempt's ending, naming where it was cut off. A lease still ours is given back in one guarded
statement; a lease lost meanwhile is never written under.

The core runner (`weave.jobs.runner.settle_cut_off`, for single attempts and each row of a batch
drain) reads back with the helpers below into `JobAttempt`; the onboarding app's runner reads back
with the same helpers (`reconnect`, `claim_landed`, `cut_reason`, `taken_over_by`) into its own
attempt table.
"""

from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connections, router

from weave.jobs.context import JobContext
from weave.leases import LeaseLost
from weave.models import JobAttempt, JobStepReceipt

CUT_OFF = "cut off"  # what a runner returns when its claim never landed: nothing of the attempt exists


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (a driver's message runs on), else its class name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def reconnect(model: Any) -> None:
    """Drop the broken connection `model` writes through; the next query opens a fresh one."""
    connections[router.db_for_write(model)].close()


def cut_reason(cut: DatabaseError, where: str, landed: str) -> str:
    """A cut-off attempt's reason: where the link failed, the driver's words, and what was read back."""
    return f"Cut off from the database {where} ({first_line(cut)}); {landed}."


def claim_landed(rows: Any, owner: str, *, pk: Any = None, fields: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """Read back, on a fresh connection, whether a cut-off claim by `owner` (of `pk`, if known) landed.

    The owner is new for every attempt, so a row naming it is our claim: its pk and fence (and `fields`)."""
    reconnect(rows.model)
    mine = rows.filter(owner=owner) if pk is None else rows.filter(pk=pk, owner=owner)
    found: dict[str, Any] | None = mine.values("pk", "fence", *fields).first()
    return found


def recorded_outcome(ctx: JobContext) -> str | None:
    """The outcome this attempt already has on record, if its finish (or a takeover's record of it) landed."""
    mine = JobAttempt.objects.filter(job_type=ctx.job_type, job_id=str(ctx.lease.pk), fence=ctx.lease.fence)
    outcome: str | None = mine.values_list("outcome", flat=True).first()
    return outcome


def what_landed(ctx: JobContext, where: str) -> str:
    """What a cut-off attempt read back of its own writes, `where` it was cut off ("at step book", ...)."""
    if where == "at the claim":
        return "the claim had landed, only its reply was lost"
    if where == "at the finish":
        return "nothing of the finish landed"
    if not where.startswith("at step"):
        return "none of its steps had saved anything yet"
    saved = JobStepReceipt.objects.filter(
        job_type=ctx.job_type, job_id=str(ctx.lease.pk), step=ctx.step, fence=ctx.lease.fence
    ).exists()
    return f"the save of step {ctx.step} had landed" if saved else f"nothing of step {ctx.step}'s save landed"


def taken_over_by(rows: Any, lease: Any, attempt_owner: Callable[[int], str | None]) -> str | None:
    """Say "Taken over meanwhile by worker-b at fence 2." when the row's fence moved past `lease`'s, else None.

    The job may be finished and free by now: then `attempt_owner(fence)` (the owner of the attempt at
    that fence, from the caller's attempt table) names who took it over."""
    row = rows.filter(pk=lease.pk).values("owner", "fence").first()
    if row is None or row["fence"] == lease.fence:
        return None
    taker = row["owner"] or attempt_owner(row["fence"])
    holder = f"{taker} at fence {row['fence']}" if taker else f"fence {row['fence']}"
    return f"Taken over meanwhile by {holder}."


def taken_over(ctx: JobContext, lost: LeaseLost) -> str:
    """Who took the job over meanwhile (named from its `JobAttempt` record), else why the lease was lost."""

    def attempt_owner(fence: int) -> str | None:
        mine = JobAttempt.objects.filter(job_type=ctx.job_type, job_id=str(ctx.lease.pk), fence=fence)
        owner: str | None = mine.values_list("owner", flat=True).first()
        return owner

    return taken_over_by(ctx.rows, ctx.lease, attempt_owner) or ctx.blocked_reason(lost, "meanwhile")

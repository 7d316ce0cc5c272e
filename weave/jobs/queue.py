"""Drain requests for drained job types: one coalesced drain task per job type runs all its due jobs."""

from typing import Any

from weave.wake import SlotClaimSQL, finish_claimed_request, request_name, request_task, slot_claim_sql

TASK = "weave.jobs.tasks.drain"
_named: dict[str, tuple[str, str]] = {}  # job type -> (the name of its requests and tasks, their group)


def name_requests(job_type: str, *, request: str, group: str) -> None:
    """Name the drain requests and tasks of `job_type` (`register`: a `JobType`'s `request` and key)."""
    _named[job_type] = (request or _names(job_type)[0], group)


def _names(job_type: str) -> tuple[str, str]:
    """The names `job_type` was registered with, else the defaults: `weave.jobs.drain:<type>`, its own group."""
    return _named.get(job_type, (f"weave.jobs.drain:{job_type}", job_type))


def drain_request_name(job_type: str) -> str:
    return request_name(_names(job_type)[0])


def _task_options(job_type: str) -> dict[str, Any]:
    base, group = _names(job_type)
    return {"group": group, "task_name": base}


def enqueue_drain(job_type: str) -> bool:
    """Ask for a drain of `job_type` unless one is already waiting; return whether it was enqueued."""
    return request_task(drain_request_name(job_type), TASK, job_type, **_task_options(job_type))


def drain_claim_sql(job_type: str, *, only_if: str = "TRUE") -> SlotClaimSQL:
    """The slot claim of a drain of `job_type`, for an INSERT of its rows that carries it (PostgreSQL,
    autocommit), so the rows and the request commit in one trip; `only_if`: as `slot_claim_sql`."""
    return slot_claim_sql(drain_request_name(job_type), only_if=only_if)


def drain_claimed(job_type: str, taken: bool) -> bool:
    """Finish a drain request whose claim (`drain_claim_sql`) committed; return whether a drain was enqueued."""
    name = drain_request_name(job_type)
    return finish_claimed_request(name, TASK, job_type, taken=taken, **_task_options(job_type))


def enqueue_job(job_type: str, pk: Any) -> bool:
    """Ask for an attempt at job `pk` of `job_type` now: a drain of its type, which runs every due job of it."""
    return enqueue_drain(job_type)


def enqueue_due(declared: Any) -> int:
    """Ask for a drain of job type `declared` (a `JobType`) when a row of it is due; return how many were
    asked for (0 or 1)."""
    return int(declared.has_due_rows() and enqueue_drain(declared.name))

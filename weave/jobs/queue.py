"""Drain requests for core-run job types: one coalesced drain task per job type runs all its due jobs."""

from typing import Any

from weave.wake import request_name, request_task


def drain_request_name(job_type: str) -> str:
    return request_name(f"weave.jobs.drain:{job_type}")


def enqueue_drain(job_type: str) -> bool:
    """Ask for a drain of `job_type` unless one is already waiting; return whether it was enqueued."""
    return request_task(drain_request_name(job_type), "weave.jobs.tasks.drain", job_type, group=job_type)


def enqueue_job(job_type: str, pk: Any) -> bool:
    """Ask for an attempt at job `pk` of `job_type` now: a drain of its type, which runs every due job of it."""
    return enqueue_drain(job_type)


def enqueue_due(declared: Any) -> int:
    """Ask for a drain of job type `declared` (a `JobType`) when a row of it is due; return how many were
    asked for (0 or 1)."""
    return int(declared.has_due_rows() and enqueue_drain(declared.name))

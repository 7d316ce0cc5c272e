"""Job types: one declaration per kind of leased job, and the public API for a site's own fenced jobs.

    from weave.jobs import JobType, Step, job, register

A built-in app registers its job type for the core's registries; a site's own job type (a model on
`weave.models.JobModel` with a `handler` or `steps`) is also run by the core: claimed by the database
clock, its writes guarded, its steps kept as receipts, its story told by `weave_explain`.

An app that asks for its own django-q2 tasks (rather than a job per row) does so through
`weave.workers`; `weave.jobs.queue` is the core's own side of it.
"""

from weave.jobs.context import JobContext, claim
from weave.jobs.cutoff import first_line, landed_claim, record_blocked, settle_cut_off
from weave.jobs.declaration import JobType, get, job, job_types, register, ttl_settings
from weave.jobs.policy import Fail, RetryPolicy
from weave.jobs.queue import enqueue_job
from weave.jobs.records import AttemptRecords
from weave.jobs.steps import (
    PhaseError,
    Step,
    UndoWalk,
    check_steps,
    phase_before,
    saved_result,
    steps_after,
    undo_steps,
    working,
)
from weave.retry import backoff_seconds

__all__ = [
    "AttemptRecords",
    "Fail",
    "JobContext",
    "JobType",
    "PhaseError",
    "RetryPolicy",
    "Step",
    "UndoWalk",
    "backoff_seconds",
    "check_steps",
    "claim",
    "enqueue_job",
    "first_line",
    "get",
    "job",
    "job_types",
    "landed_claim",
    "phase_before",
    "record_blocked",
    "register",
    "saved_result",
    "settle_cut_off",
    "steps_after",
    "ttl_settings",
    "undo_steps",
    "working",
]

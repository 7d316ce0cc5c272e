"""Job types: one declaration per kind of leased job, and the public API for a site's own fenced jobs.

    from weave.jobs import JobType, Step, job, register

A built-in app registers its job type for the core's registries; a site's own job type (a model on
`weave.models.JobModel` with a `handler` or `steps`) is also run by the core: claimed by the database
clock, its writes guarded, its steps kept as receipts, its story told by `weave_explain`.

A drained type's tasks are asked for with `enqueue_drain` (or `enqueue_job`), or, where the rows'
INSERT should carry the request in the same statement, `drain_claim_sql` and then `drain_claimed`;
`drain` runs one drain here and now, as its task does.
"""

from weave.jobs.context import JobContext, claim
from weave.jobs.cutoff import first_line, landed_claim, record_blocked, settle_cut_off
from weave.jobs.declaration import JobType, get, job, job_types, register, ttl_settings
from weave.jobs.policy import AttemptUnfinished, Fail, RetryPolicy
from weave.jobs.queue import drain_claim_sql, drain_claimed, enqueue_drain, enqueue_job
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
from weave.jobs.tasks import drain
from weave.retry import backoff_seconds

__all__ = [
    "AttemptRecords",
    "AttemptUnfinished",
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
    "drain",
    "drain_claim_sql",
    "drain_claimed",
    "enqueue_drain",
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

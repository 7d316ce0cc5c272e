"""Job types: one declaration per kind of leased job, and the public API for a site's own fenced jobs.

    from weave.jobs import JobType, Step, job, register

A built-in app registers its job type for the core's registries; a site's own job type (a model on
`weave.models.JobModel` with a `handler` or `steps`) is also run by the core: claimed by the database
clock, its writes guarded, its steps kept as receipts, its story told by `weave_explain`.
"""

from weave.jobs.context import JobContext, claim
from weave.jobs.declaration import JobType, Step, get, job, job_types, register, ttl_settings
from weave.jobs.policy import Fail, RetryPolicy
from weave.jobs.queue import enqueue_job, request, request_claimed, request_name, settled, started

__all__ = [
    "Fail",
    "JobContext",
    "JobType",
    "RetryPolicy",
    "Step",
    "claim",
    "enqueue_job",
    "get",
    "job",
    "job_types",
    "register",
    "request",
    "request_claimed",
    "request_name",
    "settled",
    "started",
    "ttl_settings",
]

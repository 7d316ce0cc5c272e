"""Ask for a push drain: the engine's drain of the notification job type, under the request and task name
push has always used. A leaf that the worker, the services and the watcher import instead of the tasks."""

from weave import jobs, workers

JOB = "notification"  # the job type (`notifications.apps`)
JOB_KEY = "notifications"  # its registry key, which also names its watch and its tasks' group
DRAIN = "notifications.drain"  # its drain's request and task name


def drain_request_name() -> str:
    return workers.request_name(DRAIN)


def enqueue_drain() -> bool:
    """Ask for a drain unless one is already waiting to start; return whether one was enqueued."""
    return jobs.enqueue_drain(JOB)


def drain_claim_sql(*, only_if: str = "TRUE") -> workers.SlotClaimSQL:
    """The drain request's slot claim, for an INSERT that carries it (PostgreSQL, autocommit)."""
    return jobs.drain_claim_sql(JOB, only_if=only_if)


def drain_claimed(taken: bool) -> bool:
    """Finish a drain request whose claim (`drain_claim_sql`) committed; return whether a drain was enqueued."""
    return jobs.drain_claimed(JOB, taken)

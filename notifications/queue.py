"""Ask for a drain: a leaf that the worker, the services and the watcher import instead of the tasks."""

from weave import workers

DRAIN = "notifications.drain"
JOB_KEY = "notifications"  # the job type's key (`notifications.apps`), which also names its watch
_TASK = {"group": "notifications", "task_name": DRAIN}


def drain_request_name() -> str:
    return workers.request_name(DRAIN)


def enqueue_drain() -> bool:
    """Ask for a drain unless one is already waiting to start; return whether one was enqueued."""
    return workers.request_task(drain_request_name(), "notifications.tasks.drain", **_TASK)


def drain_claim_sql(*, only_if: str = "TRUE") -> workers.SlotClaimSQL:
    """The drain request's slot claim, for an INSERT that carries it (PostgreSQL, autocommit)."""
    return workers.slot_claim_sql(drain_request_name(), only_if=only_if)


def drain_claimed(taken: bool) -> bool:
    """Finish a drain request whose claim (`drain_claim_sql`) committed; return whether a drain was enqueued."""
    return workers.finish_claimed_request(drain_request_name(), "notifications.tasks.drain", taken=taken, **_TASK)

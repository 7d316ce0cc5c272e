"""Ask for a drain: a leaf that the worker, the services and the watcher import instead of the tasks."""

from weave import workers

DRAIN = "notifications.drain"
# The notifications job type's key (`notifications.apps`), which also names its due-time watch.
JOB_KEY = "notifications"


def drain_request_name() -> str:
    """The request row of this broker queue's drains: clusters on other queues get their own."""
    return workers.request_name(DRAIN)


_DRAIN_TASK = "notifications.tasks.drain"


def enqueue_drain() -> bool:
    """Ask for a drain unless one is already waiting to start (`weave.workers.request_task`); return
    whether a task was enqueued. A running drain does not block a new request: a backlog spreads."""
    return workers.request_task(drain_request_name(), _DRAIN_TASK, task_name=DRAIN, group="notifications")


def drain_claim_sql(*, only_if: str = "TRUE") -> workers.SlotClaimSQL:
    """The drain request's slot claim as SQL pieces, for an INSERT that carries it (PostgreSQL, autocommit);
    `only_if`: a further condition of the claim (`weave.workers.slot_claim_sql`)."""
    return workers.slot_claim_sql(drain_request_name(), only_if=only_if)


def drain_claimed(taken: bool, already_taken: bool) -> bool:
    """Finish a drain request whose claim (`drain_claim_sql`) was committed; return whether a drain was enqueued."""
    return workers.finish_claimed_request(
        drain_request_name(),
        _DRAIN_TASK,
        taken=taken,
        already_taken=already_taken,
        task_name=DRAIN,
        group="notifications",
    )

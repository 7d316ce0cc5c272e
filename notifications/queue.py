"""Ask for a drain. A leaf: it knows the broker API, the task's dotted name and Weave's wake-up rows.

The worker (`delivery`), the services and the due-time watcher all ask for a drain through here, so
none of them imports the task module that imports the worker.
"""

from weave import workers

DRAIN = "notifications.drain"
# The notifications job type's key (`notifications.apps`), which also names its due-time watch.
JOB_KEY = "notifications"


def drain_request_name() -> str:
    """The request row of this broker queue's drains: clusters on other queues get their own."""
    return workers.request_name(DRAIN)


_DRAIN_TASK = "notifications.tasks.drain"


def enqueue_drain() -> bool:
    """Ask the workers to drain due notifications, unless a drain is already waiting to start.

    One drain delivers every due row it can within its budget, so a second waiting drain would only
    find the work done. The coalescing is Weave's own row (`weave.workers.request_task`), one guarded
    statement, whatever the broker. A running drain does not block a new request: work that arrives
    while it runs gets another drain, which is how a backlog spreads over every worker.
    Returns whether a task was enqueued.
    """
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

"""Ask for a drain. A leaf: it knows the broker API, the task's dotted name and Weave's wake-up rows.

The worker (`delivery`), the services and the due-time watcher all ask for a drain through here, so
none of them imports the task module that imports the worker.
"""

from weave import jobs

DRAIN = "notifications.drain"


def drain_request_name() -> str:
    """The request row of this broker queue's drains: clusters on other queues get their own."""
    return jobs.request_name(DRAIN)


def enqueue_drain() -> bool:
    """Ask the workers to drain due notifications, unless a drain is already waiting to start.

    One drain delivers every due row it can within its budget, so a second waiting drain would only
    find the work done. The coalescing is Weave's own row (`weave.wake.request_once`), one guarded
    statement, whatever the broker. A running drain does not block a new request: work that arrives
    while it runs gets another drain, which is how a backlog spreads over every worker.
    Returns whether a task was enqueued.
    """
    return jobs.request(drain_request_name(), "notifications.tasks.drain", task_name=DRAIN, group="notifications")

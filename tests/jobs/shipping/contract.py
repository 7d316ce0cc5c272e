"""`@task` functions the conformance suite runs: each shows one part of the `django.tasks` contract."""

import asyncio
import time
from pathlib import Path

import django

from weave.tasks.compat import task

# Django 6.0's @task takes no extra keywords; 6.1 and the backport hand them to the backend's task class.
DECORATOR_TAKES_OPTIONS = django.VERSION[:2] != (6, 0)


def task_with(*, takes_context: bool = False, **options):
    """@task with Weave's options: in the decorator where Django passes them on, else through .using()."""

    def declare(func):
        if DECORATOR_TAKES_OPTIONS:
            return task(takes_context=takes_context, **options)(func)
        # The module attribute keeps the function's name, so the task's path still finds this copy.
        return task(takes_context=takes_context)(func).using(**options)

    return declare


# A test adds callables here to act while a task runs (advance the fake clock, take the lease over).
while_running: list = []


@task(takes_context=True)
def look_around(context, tag: str) -> dict:
    """Report what the task sees of itself while it runs."""
    for hook in list(while_running):
        hook(context)
    result = context.task_result
    return {
        "tag": tag,
        "attempt": context.attempt,
        "status": str(result.status),
        "worker_ids": list(result.worker_ids),
        "started": result.started_at is not None,
    }


@task_with(takes_context=True, max_attempts=3, retry_on=[ConnectionError], backoff=1)
def flaky(context) -> int:
    """Fail the first attempt with an error the task retries, succeed the next."""
    if context.attempt == 1:
        raise ConnectionError("carrier unreachable")
    return context.attempt


@task()
async def add_later(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task_with(lease_ttl=6, timeout=20)
def busy(label: str) -> str:
    """A task without a context that works for a while (the hooks move the fake clock)."""
    for hook in list(while_running):
        hook(label)
    return label


@task_with(max_attempts=2)
def at_most_twice() -> str:
    for hook in list(while_running):
        hook("at_most_twice")
    return "ran"


@task_with(lease_ttl=2, timeout=30)
def sleep_then_note(path: str, seconds: float) -> str:
    """Longer than its lease: note each start in `path` (another process reads it), then sleep."""
    with Path(path).open("a") as notes:
        notes.write("started\n")
    time.sleep(seconds)
    return "slept"

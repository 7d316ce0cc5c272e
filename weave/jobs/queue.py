"""Coalesced task requests for a job type (`weave.wake.request_once`, whatever the broker): `request`
asks for a task once, `started` (first thing in the task) frees the slot and tells the watchers,
`settled` (as it ends) tells them due times changed."""

from collections.abc import Callable
from typing import Any

from django_q.conf import Conf
from django_q.tasks import async_task

from weave import wake


def request_name(base: str) -> str:
    """The request row of `base` on this broker queue: clusters on other queues get their own."""
    return f"{base}@{Conf.CLUSTER_NAME}"


def request(name: str, func: str, *args: Any, group: str, task_name: str | None = None) -> bool:
    """Enqueue `func(*args)` unless a task under request `name` is already waiting; return whether it was."""
    return wake.request_once(name, enqueue=_enqueuer(func, *args, group=group, task_name=task_name))


def request_claimed(
    name: str, func: str, *args: Any, taken: bool, already_taken: bool, group: str, task_name: str | None = None
) -> bool:
    """`request`, for a caller whose own committed statement carried the slot claim (`wake.slot_claim_sql`)."""
    enqueue = _enqueuer(func, *args, group=group, task_name=task_name)
    return wake.finish_claim(name, taken, already_taken, enqueue=enqueue)


def _enqueuer(func: str, *args: Any, group: str, task_name: str | None) -> Callable[[], None]:
    options: dict[str, Any] = {"group": group}
    if task_name is not None:
        options["task_name"] = task_name
    return lambda: async_task(func, *args, **options)


def started(name: str, *, forget: bool = False) -> None:
    """The task of request `name` is running: free its slot (`forget`: delete a per-job row) and tell the watchers."""
    wake.task_started(name, forget=forget)
    wake.tell_watchers()


def settled() -> None:
    """The task is done: due times changed, so the watchers recompute the earliest one."""
    wake.tell_watchers()


# --- the core's own runner: one drain per job type ---------------------------------------------------


def drain_request_name(job_type: str) -> str:
    return request_name(f"weave.jobs.drain:{job_type}")


def enqueue_drain(job_type: str) -> bool:
    """Ask for a drain of `job_type` (it runs every due job of the type), unless one is already waiting."""
    return request(drain_request_name(job_type), "weave.jobs.tasks.drain", job_type, group=job_type)


def enqueue_job(job_type: str, pk: Any) -> bool:
    """Ask for an attempt at job `pk` of `job_type` now: a drain of its type, which runs every due job of it."""
    return enqueue_drain(job_type)


def enqueue_due(job_type: str, model: Any) -> int:
    """Ask for a drain of `job_type` when a job of it is due; return how many drains were asked for (0 or 1)."""
    return int(model.objects.due().exists() and enqueue_drain(job_type))

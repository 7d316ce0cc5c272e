"""`WeaveBackend`: a `django.tasks` backend whose tasks run as fenced Weave jobs.

    TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend"}}

`enqueue` stores the task (one row, in the caller's transaction) and asks for a drain once the
transaction commits; `get_result` reads the row and its attempts back.
"""

# Django 6's Task and TaskResult are not generic at run time (the backport's are): annotations stay unevaluated.
from __future__ import annotations

from typing import Any

from django.db import transaction

from weave.leases import default_clock
from weave.models import TaskRow
from weave.tasks.compat import BaseTaskBackend, Task, TaskResult, TaskResultDoesNotExist, get_random_id, normalize_json
from weave.tasks.results import task_result
from weave.tasks.worker import enqueue_drain, ensure_registered


class WeaveBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = False
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        ensure_registered()

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """Store the task to run after `task.run_after` (or now), by priority; a drain is asked for on commit."""
        self.validate_task(task)
        row = TaskRow.objects.create(
            result_id=get_random_id(),
            backend=self.alias,
            queue_name=task.queue_name,
            task_path=task.module_path,
            priority=task.priority,
            takes_context=task.takes_context,
            args=normalize_json(list(args)),
            kwargs=normalize_json(dict(kwargs)),
            next_attempt_at=task.run_after,
        )
        transaction.on_commit(lambda: enqueue_drain(task.queue_name))
        return task_result(row, clock=default_clock)

    def get_result(self, result_id: str) -> TaskResult[Any]:
        row = TaskRow.objects.with_lease_state().filter(result_id=result_id).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        return task_result(row)

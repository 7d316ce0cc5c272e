"""`WeaveBackend`: a `django.tasks` backend whose tasks run as fenced Weave jobs.

    TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend"}}

`enqueue` stores the task (one INSERT, in the caller's transaction; `weave.tasks.store`), builds its
result from what it inserted, and asks for a drain of the task's queue once the transaction commits (one request per
queue per transaction, however many tasks it enqueued); `get_result` reads the row and its attempts.
"""

# Django 6's Task and TaskResult are not generic at run time (the backport's are): annotations stay unevaluated.
from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import router, transaction

from weave.models import TaskRow
from weave.tasks.compat import (
    BaseTaskBackend,
    InvalidTaskError,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from weave.tasks.definition import WeaveTask
from weave.tasks.options import TaskOptions, backend_options, validate
from weave.tasks.results import enqueued_result, task_result
from weave.tasks.store import insert_task
from weave.tasks.worker import enqueue_drain, ensure_registered


class WeaveBackend(BaseTaskBackend):
    task_class = WeaveTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Defaults for Weave's task options (OPTIONS: MAX_ATTEMPTS, BACKOFF, RETRY_ON, TIMEOUT, LEASE_TTL).
        self.task_defaults = backend_options(params, alias=alias)
        self._validated: dict[int, tuple[Task[Any, Any], dict[str, Any]]] = {}
        self.resolved_options: dict[str, TaskOptions] = {}  # by stored options (weave.tasks.worker.options_of)
        ensure_registered()

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        self._stored_options(task)

    def _stored_options(self, task: Task[Any, Any]) -> dict[str, Any]:
        """The Weave options `task` is stored with, checked (`InvalidTaskError` when wrong)."""
        if not isinstance(task, WeaveTask):
            return {}
        try:
            return validate(task.weave_options(), where=f"Task {task.module_path}")
        except ImproperlyConfigured as wrong:
            raise InvalidTaskError(str(wrong)) from None

    def _checked(self, task: Task[Any, Any]) -> dict[str, Any]:
        """Validate `task` once per task object this backend sees (tasks are frozen), and return its options."""
        known = self._validated.get(id(task))
        if known is not None and known[0] is task:
            return known[1]
        super().validate_task(task)
        options = self._stored_options(task)
        if len(self._validated) >= 1024:
            self._validated.clear()
        self._validated[id(task)] = (task, options)  # the task is kept: its id stays its own
        return options

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """Store the task to run after `task.run_after` (or now), by priority; a drain is asked for on commit."""
        options = self._checked(task)
        values = {
            "result_id": uuid.uuid4().hex,  # 32 characters, as the framework's own ids, from one random read
            "backend": self.alias,
            "queue_name": task.queue_name,
            "task_path": task.module_path,
            "priority": task.priority,
            "takes_context": task.takes_context,
            "args": normalize_json(list(args)),
            "kwargs": normalize_json(dict(kwargs)),
            "next_attempt_at": task.run_after,
            "options": options,
        }
        using = router.db_for_write(TaskRow)
        # The database's clock, as every time a task's story shows (not this host's, which may be off).
        values["created_at"] = insert_task(values, using=using)
        _drain_on_commit(task.queue_name, using=using)
        result = enqueued_result(task, values)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        row = TaskRow.objects.with_lease_state().filter(result_id=result_id).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        return task_result(row)


class _DrainOnCommit:
    """The on-commit request for a drain of one queue: one per queue per transaction, found again by its queue."""

    def __init__(self, queue_name: str) -> None:
        self.queue_name = queue_name

    def __call__(self) -> None:
        enqueue_drain(self.queue_name)


def _drain_on_commit(queue_name: str, *, using: str) -> None:
    connection = transaction.get_connection(using)
    if connection.in_atomic_block:
        # A request for this queue already waits for this commit (a rolled back savepoint drops its own).
        for _sids, func, *_robust in connection.run_on_commit:
            if isinstance(func, _DrainOnCommit) and func.queue_name == queue_name:
                return
    transaction.on_commit(_DrainOnCommit(queue_name), using=using)

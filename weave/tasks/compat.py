"""The tasks framework's names, from Django itself (6.0 and later) or from the `django-tasks` backport.

The API is the same, so upgrading Django is a dependency change. The choice follows Django's version,
not what happens to import: on Django 6 the built-in framework is used even when the backport is also
installed (a task declared with the backport's `@task` is not a task here), and a name missing from
Django's framework is an error of its own rather than a silent fall back to the backport.
"""

import logging
from typing import TYPE_CHECKING

import django

from weave.events import RedactedTracebacks

if TYPE_CHECKING:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import get_random_id, normalize_json
elif django.VERSION >= (6, 0):
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.crypto import get_random_string
    from django.utils.json import normalize_json

    def get_random_id() -> str:
        """A result id as Django's own backends make them (the backport's helper is not in Django)."""
        return get_random_string(32)
else:
    try:
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist, TaskResultMismatch
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import get_random_id, normalize_json
    except ModuleNotFoundError as exc:
        if exc.name != "django_tasks":
            raise
        raise ModuleNotFoundError(
            f"weave.tasks on Django {django.get_version()} needs the django-tasks backport of Django 6's "
            'django.tasks: pip install "weave-jobs[tasks]".',
            name=exc.name,
        ) from exc

# The framework's own receiver logs a failed task with its traceback (`weave.tasks.worker._send_finished`).
TASKS_LOGGER = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
logging.getLogger(TASKS_LOGGER).addFilter(RedactedTracebacks())

__all__ = [
    "TASKS_LOGGER",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "get_random_id",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

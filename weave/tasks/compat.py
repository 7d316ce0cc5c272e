"""The tasks framework's names, from Django itself (6.0 and later) or from the `django-tasks` backport.

The API is the same, so upgrading Django is a dependency change: this module picks whichever exists.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import get_random_id, normalize_json
else:
    try:
        from django.tasks import TaskContext, TaskResult, TaskResultStatus
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.tasks.utils import get_random_id, normalize_json

        try:
            from django.tasks.exceptions import InvalidTask as InvalidTaskError
        except ImportError:
            from django.tasks.exceptions import InvalidTaskError
    except ImportError:
        from django_tasks import TaskContext, TaskResult, TaskResultStatus
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import get_random_id, normalize_json

__all__ = [
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "get_random_id",
    "normalize_json",
    "task_enqueued",
    "task_finished",
    "task_started",
]

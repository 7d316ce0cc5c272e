"""`WeaveTask`: the backend's `task_class`, a `Task` that also carries Weave's options.

    @task(timeout=600, max_attempts=5, retry_on=[ConnectionError])   # Django 6.1, django-tasks 0.12
    def sync_catalogue(): ...

    sync_catalogue.using(timeout=1200).enqueue()                     # any version

Each option left out (None) is taken from the backend's `OPTIONS`, then from Weave's default
(`weave.tasks.options.DEFAULTS`). The options are stored with each enqueued task, so a worker runs
it with the options it was enqueued with.
"""

from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from weave.tasks.compat import Task
from weave.tasks.options import NAMES
from weave.wording import plural


@dataclass(frozen=True, slots=True, kw_only=True)
class WeaveTask(Task):  # type: ignore[type-arg]  # generic in the backport, plain in Django
    """A `Task` with Weave's options: `max_attempts`, `backoff`, `retry_on`, `timeout` and `lease_ttl`."""

    max_attempts: int | None = None
    backoff: float | None = None
    retry_on: tuple[Any, ...] | list[Any] | None = None
    timeout: float | None = None
    lease_ttl: float | None = None

    def using(  # Django's keywords, plus Weave's options
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        **options: Any,
    ) -> "WeaveTask":
        """A copy with other defaults: Django's (priority, queue_name, run_after, backend) and Weave's options."""
        unknown = sorted(set(options) - set(NAMES))
        if unknown:
            raise TypeError(
                f"using() got unknown {plural(len(unknown), 'option{}')} {', '.join(unknown)};"
                f" Weave's are {', '.join(NAMES)}."
            )
        changed = Task.using(self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend)
        given = {name: value for name, value in options.items() if value is not None}
        return replace(changed, **given) if given else changed

    def weave_options(self) -> dict[str, Any]:
        """The options this task sets itself (None left out)."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name in NAMES}
        return {name: value for name, value in given.items() if value is not None}

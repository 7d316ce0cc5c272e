"""The context a `takes_context` task receives: the framework's own, plus the job's lease and guard."""

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from weave.jobs import JobContext
from weave.leases import Heartbeat, Lease
from weave.tasks.compat import TaskContext


@dataclass(frozen=True, kw_only=True)
class WeaveTaskContext(TaskContext):
    """`context.attempt` and `context.task_result` as usual; `context.guarded()` for the task's own writes.

    `attempt` counts from 1: it is the number of this start of the task (a takeover after a lost lease
    is a new attempt), as stored by the claim.
    """

    job: JobContext

    @property
    def attempt(self) -> int:
        return int(self.job.attempt)

    @property
    def lease(self) -> Lease:
        return self.job.lease

    @property
    def idempotency_key(self) -> str:
        return f"{self.job.idempotency_key}{self.task_result.id}"

    def guarded(self, **fields: Any) -> AbstractContextManager[None]:
        """A transaction whose first statement is the guarded update: a stale worker's writes never land."""
        return self.job.guarded(**fields)

    def heartbeat(self) -> Heartbeat:
        """Keep the lease alive around a slow call (stops at the attempt's budget)."""
        return self.job.heartbeat()

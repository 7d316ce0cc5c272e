"""What a job's handler holds while it runs: the lease, a guarded transaction, a heartbeat, a step's key."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import models, router, transaction

from weave.leases import Clock, Heartbeat, Lease


@dataclass
class JobContext:
    """One attempt at one job, as its handler (or step) sees it.

    - `lease`: the (owner, fence) this attempt holds; `job`: the row as read right after the claim.
    - `guarded()`: a transaction that runs the guarded update first, then the handler's own writes;
      zero rows matched raises `LeaseLost` before any of them ran, and rolls back the block.
    - `heartbeat()`: keeps the lease alive around a slow call (renews every ttl/3 until the budget ends).
    - `idempotency_key`: stable for this step of this job across attempts; send it with external calls.
    - `results`: the results of the steps already done (read back from their receipts on a resume).
    """

    job_type: str
    job: Any
    lease: Lease
    attempt: int
    epoch: int
    ttl: float
    clock: Clock
    budget_ends: float | None = None  # on clock.monotonic()
    step: str = ""
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> type[models.Model]:
        return type(self.job)

    @property
    def idempotency_key(self) -> str:
        return f"{self.job_type}:{self.lease.pk}:{self.epoch}:{self.step}"

    @contextmanager
    def guarded(self, **fields: Any) -> Iterator[None]:
        """Open a transaction whose first statement is the guarded update (renewing the lease, writing `fields`).

        The update's row lock holds a competing claim off until commit, so the writes inside the block
        land only while this attempt still holds the job; a lost lease raises `LeaseLost` and nothing lands.
        """
        manager: Any = self.model._default_manager
        with transaction.atomic(using=router.db_for_write(self.model)):
            manager.guarded_update(
                self.lease, clock=self.clock, lease_expires_at=self.clock.now(timedelta(seconds=self.ttl)), **fields
            )
            yield

    def heartbeat(self) -> Heartbeat:
        """A heartbeat for one slow call: `with ctx.heartbeat() as hb: ...; hb.check()` before relying on it."""
        budget = None if self.budget_ends is None else max(0.0, self.budget_ends - self.clock.monotonic())
        return Heartbeat(self.model._default_manager, self.lease, ttl=self.ttl, clock=self.clock, budget=budget)  # type: ignore[arg-type]

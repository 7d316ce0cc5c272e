"""What a job's handler holds while it runs: the lease, a guarded transaction, a heartbeat, a step's key.

`claim()` opens an attempt: one claim by the database clock, and the `JobContext` every later write
of that attempt goes through (guarded updates, renewals, the release). The core's runner and the
onboarding app's runner both start their attempts here.
"""

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import models, router, transaction

from weave.leases import Clock, Heartbeat, Lease, LeaseLost, default_clock


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
    # The leased model, for an attempt whose row is read only after its first guarded write.
    job_model: type[models.Model] | None = None
    # In batch mode, the `weave.leases.BatchHeartbeat` keeping this attempt's lease (and its batch's).
    batch: Any = None
    # The exception the attempt failed with, once it has (for the job type's `finished` hooks).
    error: BaseException | None = None
    # What every guarded write and the release of this attempt also expect of the row (the core runner:
    # the job's state, so that a cancel-and-undo landing mid-attempt refuses the attempt's next save).
    guard: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> type[models.Model]:
        return self.job_model or type(self.job)

    @property
    def rows(self) -> Any:
        """The model's lease queryset: the one place guarded updates live."""
        return self.model._default_manager

    @property
    def idempotency_key(self) -> str:
        return f"{self.job_type}:{self.lease.pk}:{self.epoch}:{self.step}"

    @property
    def claimed_at(self) -> datetime | None:
        """The claim's own database time: its expiry less the TTL it was granted."""
        return None if self.lease.expires_at is None else self.lease.expires_at - timedelta(seconds=self.ttl)

    def budget_left(self) -> float | None:
        """Seconds this attempt may still work (None: no budget); below zero once it is spent."""
        return None if self.budget_ends is None else self.budget_ends - self.clock.monotonic()

    def still_held(self) -> bool:
        """Whether this attempt still holds the job under a live lease, by the database clock (read, not written)."""
        held: bool = self.rows.held_by(self.lease, self.clock).exists()
        return held

    def database_time(self, seconds: float = 0.0) -> datetime | None:
        """The database clock's time `seconds` from now (for a due time a reason must name before it is written)."""
        at: datetime | None = (
            self.rows.filter(pk=self.lease.pk)
            .annotate(at=self.clock.now(timedelta(seconds=seconds)))
            .values_list("at", flat=True)
            .first()
        )
        return at

    @contextmanager
    def guarded(self, *, expect: Mapping[str, Any] | None = None, renew: bool = True, **fields: Any) -> Iterator[None]:
        """Open a transaction whose first statement is the guarded update (writing `fields`, renewing the lease).

        The update's row lock holds a competing claim off until commit, so the writes inside the block
        land only while this attempt still holds the job; a lost lease raises `LeaseLost` and nothing lands.
        `expect` adds conditions the row must still meet (a phase, a status); `renew=False` leaves the
        expiry where the heartbeat put it (a job whose budget, not its saves, bounds the lease).
        """
        if renew:
            fields["lease_expires_at"] = self.clock.now(timedelta(seconds=self.ttl))
        with transaction.atomic(using=router.db_for_write(self.model)):
            self.rows.guarded_update(self.lease, clock=self.clock, expect=self._expect(expect), **fields)
            yield

    def release(self, *, expect: Mapping[str, Any] | None = None, **fields: Any) -> None:
        """Give the job back in one guarded statement that also writes `fields` (inside the caller's transaction)."""
        self.rows.release(self.lease, clock=self.clock, expect=self._expect(expect), **fields)

    def release_returning(
        self, returning: Sequence[str], *, expect: Mapping[str, Any] | None = None, **fields: Any
    ) -> dict[str, Any]:
        """`release`, returning the row's `returning` fields as that one statement stored them."""
        # `rows` is Any (a site model's manager): the cast says what the lease core returns.
        return cast(
            "dict[str, Any]",
            self.rows.release_returning(self.lease, returning, clock=self.clock, expect=self._expect(expect), **fields),
        )

    def _expect(self, expect: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        if not self.guard:
            return expect
        return {**self.guard, **(expect or {})}

    def heartbeat(self, *, background: bool = True) -> Heartbeat:
        """A heartbeat for one slow call: `with ctx.heartbeat() as hb: ...; hb.check()` before relying on it.

        `background=False` renews only when asked (`hb.tick()`, `hb.before_save()`): tests on a fake clock.
        """
        left = self.budget_left()
        budget = None if left is None else max(0.0, left)
        return Heartbeat(self.rows, self.lease, ttl=self.ttl, clock=self.clock, budget=budget, background=background)

    def blocked_reason(self, lost: LeaseLost, where: str, *, noun: str = "job") -> str:
        """Why this attempt stopped without writing: where it lost the lease, and who holds the job now."""
        holder = ""
        someone_else = (lost.holder, lost.holder_fence) != (self.lease.owner, self.lease.fence)
        if lost.holder is not None and someone_else and not lost.names_holder:
            holder = f" The {noun} is now held by {lost.holder} at fence {lost.holder_fence}."
        elif lost.holder is None and lost.holder_fence not in (None, self.lease.fence):
            holder = self._taken_by(lost.holder_fence)
        return f"Lease lost {where}: {lost}{holder}"

    def _taken_by(self, fence: int) -> str:
        """Name the worker whose attempt at `fence` took the job over, from its record (its lease is gone by now)."""
        from weave.models import JobAttempt

        attempts = JobAttempt.objects.filter(job_type=self.job_type, job_id=str(self.lease.pk), fence=fence)
        taker = attempts.values_list("owner", flat=True).first()
        return f" It was taken over by {taker}." if taker else ""


def claim(
    job_type: str,
    rows: Any,
    pk: Any,
    *,
    owner: str,
    ttl: float,
    clock: Clock = default_clock,
    budget: float | None = None,
    also: Mapping[str, Any] | None = None,
) -> JobContext:
    """Claim job `pk` among `rows` (a lease queryset: what may be claimed) and open its attempt's context.

    One guarded `UPDATE` by the database clock (`also` writes more fields in it, e.g. an attempt
    counter). Raises `LeaseBusy` when a live lease is someone else's, `NotClaimable` otherwise. The
    context's `job` is None until the caller reads the row (after its first guarded write, if it has one).
    """
    lease = rows.claim(pk, owner=owner, ttl=ttl, clock=clock, also=also)
    budget_ends = None if budget is None else clock.monotonic() + budget
    return JobContext(job_type, None, lease, 0, 0, float(ttl), clock, budget_ends=budget_ends, job_model=rows.model)


def claim_next(
    job_type: str,
    rows: Any,
    *,
    owner: str,
    ttl: float,
    clock: Clock = default_clock,
    budget: float | None = None,
    also: Mapping[str, Any] | None = None,
) -> JobContext | None:
    """Claim the first free or expired row of `rows` (in its order) and open its attempt; None if none is left.

    The same claim by the database clock as `claim()` (owner, fence bump, expiry, `also`), picking
    its row in the statement itself (`FOR UPDATE SKIP LOCKED` on PostgreSQL: a row another worker
    is claiming is passed over, not waited for) and reading the claimed row back in its `RETURNING`:
    the context's `job` is set, as it stands after the claim.
    """
    model = rows.model
    concrete = model._meta.concrete_fields
    names = [f.name for f in concrete]
    batch, found = rows.claim_rows(owner=owner, ttl=ttl, limit=1, fields=names, clock=clock, also=also)
    if not found:
        return None
    ((row),) = found
    pk = row["pk"]
    lease = Lease(pk=pk, owner=owner, fence=batch.fences[pk], expires_at=batch.expires_at)
    budget_ends = None if budget is None else clock.monotonic() + budget
    job = model.from_db(router.db_for_write(model), [f.attname for f in concrete], [row[name] for name in names])
    return JobContext(job_type, job, lease, 0, 0, float(ttl), clock, budget_ends=budget_ends, job_model=model)

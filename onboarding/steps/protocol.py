"""What an onboarding step is given, and how a plan entry becomes the core's `weave.jobs.Step`.

An onboarding step is the core's one step protocol (`weave.jobs.Step`: `run`, `save`, `undo`,
`check`, `undo_run`), run by the onboarding runner with a `StepContext`. A plan entry may also be any object with
onboarding's own names for the same parts (`BaseStep` is a base class for one); `as_step()` turns it
into a `weave.jobs.Step`:

- `name: str` — unique within a plan, at most 40 characters; the receipt and the phase use it.
- `title: str` (optional) — what a person reads; defaults to the name.
- `work(ctx) -> dict` (optional; the step's `run`) — the slow part. It runs under the heartbeat, may
  call outside services through `ctx.http` / `ctx.post()` with `ctx.idempotency_key`, and writes
  nothing to the database: a worker that loses its lease mid-step must leave no trace.
- `commit(ctx, output) -> dict` (the step's `save`) — runs inside the one transaction that begins with
  the guarded phase save, after it landed; it does the step's domain writes and returns the receipt's
  output. A refused save rolls all of it back. No outside calls here: the transaction holds the run's
  row lock.
- `undo_work(ctx, output) -> dict` (optional; the step's `undo_run`) — the outside calls of the
  compensation "Cancel and undo" runs for a committed step of a cancelled run, newest step first.
  `output` is the step's receipt output. It runs under the heartbeat, as `work` does, and writes
  nothing; `ctx.idempotency_key` is the step's key with `:undo` added, so a cancellation is never
  answered with the stored answer of the call it cancels.
- `undo(ctx, output) -> None` (optional) — the compensation's writes, in its own guarded transaction
  that also marks the receipt undone. `output` is what `undo_work` returned, else the receipt output.
  No outside calls here, as in `commit`.
- `check(ctx) -> None` (optional) — runs for every remaining step before the attempt's first outside
  call or write; raises `PermanentFailure` (or `BusinessRefusal`) when the step's commit part could
  not succeed with this supplier, so a run never fails halfway for a reason known at the start.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django.db.models import Expression

from onboarding.errors import PermanentFailure
from weave.jobs import Step as CoreStep
from weave.jobs import saved_result
from weave.leases import Clock, Heartbeat, Lease

if TYPE_CHECKING:
    from onboarding.client import SupplierServices
    from onboarding.models import OnboardingRun, Supplier

Output = dict[str, Any]
STEP_NAME_MAX = 40  # StepReceipt.step and OnboardingRun.phase


def idempotency_key(run_id: Any, step_name: str, reopened: int = 0) -> str:
    """Return the Idempotency-Key for the outside call of `step_name` in run `run_id`.

    The same for every attempt at (run, step), so a retried request is answered from the service's
    store. A re-opened run (`reopened` > 0) asks again with a new key: the supplier's data may have
    been corrected since the service's stored answer.
    """
    base = f"weave-onboarding:{run_id}:{step_name}"
    return f"{base}:reopened-{reopened}" if reopened else base


@dataclass
class StepContext:
    """What a step is given: the run, earlier receipts' outputs, its idempotency key and an HTTP client.

    `lease`, `clock` and `heartbeat` are there for steps that stamp rows with the fence
    (`ctx.fence`) or the database time (`ctx.now()`), as the built-in steps do.
    """

    run: "OnboardingRun"
    step_name: str
    lease: Lease
    clock: Clock
    services: Callable[[], "SupplierServices"]
    outputs: Mapping[str, Output] = field(default_factory=dict)  # earlier steps' receipts, by step name
    heartbeat: Heartbeat | None = None
    committing: bool = False  # True inside the guarded transaction: no outside calls then
    undoing: bool = False  # compensating a committed step ("Cancel and undo")

    @property
    def supplier(self) -> "Supplier":
        return self.run.supplier

    @property
    def fence(self) -> int:
        """The fence of the lease this step runs under: stamp domain rows with it."""
        return self.lease.fence

    @property
    def idempotency_key(self) -> str:
        """The key for this step's outside call: the same for every attempt at (run, step), and its own for
        the step's undo."""
        key = idempotency_key(self.run.pk, self.step_name, self.run.reopened)
        return f"{key}:undo" if self.undoing else key

    @property
    def http(self) -> "SupplierServices":
        """The HTTP client (base URL `WEAVE["SUPPLIER_API_URL"]`; absolute URLs go where they say)."""
        if self.committing:
            # The guarded transaction holds the run's row lock: a slow call here would hold it too.
            inside, outside = ("undo", "undo_work") if self.undoing else ("commit", "work")
            raise RuntimeError(f"Step {self.step_name}: outside calls belong in {outside}(), not in {inside}().")
        return self.services()

    def now(self) -> Expression:
        """The database clock's time for a timestamp field: `clock_timestamp()` in the SQL (a fake clock's literal)."""
        return self.clock.now()

    def post(self, path: str, payload: dict[str, Any]) -> tuple[int, Output]:
        """POST JSON under this step's key: retried by the shared policy, stopped by a lost lease."""
        log = {"job": "onboarding", "id": self.run.pk, "owner": self.lease.owner, "fence": self.lease.fence}
        return self.http.post(path, payload, key=self.idempotency_key, heartbeat=self.heartbeat, log=log)


@runtime_checkable
class StepLike(Protocol):
    """The least a plan entry must have; `as_step()` fills in the optional parts."""

    name: str

    def commit(self, ctx: StepContext, output: Output) -> Output | None: ...


def Step(  # noqa: N802  (named as the class it builds, which it once was)
    name: str,
    title: str = "",
    *,
    work: Callable[[StepContext], Output] | None = None,
    commit: Callable[[StepContext, Output], Output | None] | None = None,
    undo: Callable[[StepContext, Output], None] | None = None,
    check: Callable[[StepContext], None] | None = None,
    undo_work: Callable[[StepContext, Output], Output] | None = None,
) -> CoreStep:
    """Build the core's `weave.jobs.Step` from onboarding's names: `work` is its `run`, `commit` its `save`,
    `undo_work` its `undo_run`."""
    return CoreStep(name, run=work or _no_work, save=commit, undo=undo, check=check, title=title, undo_run=undo_work)


def _no_work(ctx: StepContext) -> Output:
    return {}


class BaseStep:
    """A base class for class-style steps: override `work`, `commit` and, if you can, `undo` and `undo_work`."""

    name: str = ""
    title: str = ""
    undo: Callable[[StepContext, Output], None] | None = None
    undo_work: Callable[[StepContext, Output], Output] | None = None

    def work(self, ctx: StepContext) -> Output:
        return {}

    def commit(self, ctx: StepContext, output: Output) -> Output | None:
        return output


def as_step(obj: Any, path: str = "") -> CoreStep:
    """Return `obj` (a `weave.jobs.Step`, a `BaseStep`, a class of either, or any object with the protocol's
    attributes) as a `weave.jobs.Step`. Raise `TypeError` saying what is missing."""
    if isinstance(obj, type):
        obj = obj()
    if isinstance(obj, CoreStep):
        return obj
    where = path or repr(obj)
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{where}: a step needs a non-empty str `name`.")
    commit = getattr(obj, "commit", None)
    if not callable(commit):
        raise TypeError(f"{where}: a step needs a callable `commit(ctx, output)`.")
    work = getattr(obj, "work", None) or _no_work
    undo = getattr(obj, "undo", None)
    check = getattr(obj, "check", None)
    undo_work = getattr(obj, "undo_work", None)
    for attr, value in (("work", work), ("undo", undo), ("check", check), ("undo_work", undo_work)):
        if value is not None and not callable(value):
            raise TypeError(f"{where}: `{attr}` must be callable or absent.")
    title = str(getattr(obj, "title", "") or "")
    return CoreStep(name, run=work, save=commit, undo=undo, check=check, title=title, undo_run=undo_work)


def receipt_output(step: CoreStep, ctx: StepContext, output: Output) -> Output:
    """Run the step's save (its `commit`) and return the receipt's output, which must be a dict."""
    result = saved_result(step, ctx, output)
    if not isinstance(result, dict):
        raise PermanentFailure(f"Step {step.name}: commit() returned {type(result).__name__}, not a dict.")
    return result

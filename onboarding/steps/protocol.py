"""The step protocol: what one onboarding step is, and what it is given.

A step is any object with these attributes (`Step` below is a ready-made one; subclassing
`BaseStep` is another way):

- `name: str` — unique within a plan, at most 40 characters; the receipt and the phase use it.
- `title: str` (optional) — what a person reads; defaults to the name.
- `work(ctx) -> dict` (optional) — the slow part. It runs under the heartbeat, may call outside
  services through `ctx.http` / `ctx.post()` with `ctx.idempotency_key`, and writes nothing to the
  database: a worker that loses its lease mid-step must leave no trace.
- `commit(ctx, output) -> dict` — runs inside the one transaction that begins with the guarded phase
  save, after it landed; it does the step's domain writes and returns the receipt's output. A refused
  save rolls all of it back. No outside calls here: the transaction holds the run's row lock.
- `undo(ctx, output) -> None` (optional) — the compensation "Cancel and undo" runs for a committed
  step of a cancelled run, in its own guarded transaction, newest step first. `output` is the
  step's receipt output.
- `check(ctx) -> None` (optional) — runs for every remaining step before the attempt's first outside
  call or write; raises `PermanentFailure` (or `BusinessRefusal`) when the step's commit part could
  not succeed with this supplier, so a run never fails halfway for a reason known at the start.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django.db.models import Expression

from onboarding.errors import PermanentFailure
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

    @property
    def supplier(self) -> "Supplier":
        return self.run.supplier

    @property
    def fence(self) -> int:
        """The fence of the lease this step runs under: stamp domain rows with it."""
        return self.lease.fence

    @property
    def idempotency_key(self) -> str:
        """The key for this step's outside call: the same for every attempt at (run, step)."""
        return idempotency_key(self.run.pk, self.step_name, self.run.reopened)

    @property
    def http(self) -> "SupplierServices":
        """The HTTP client (base URL `WEAVE["SUPPLIER_API_URL"]`; absolute URLs go where they say)."""
        if self.committing:
            # The guarded transaction holds the run's row lock: a slow call here would hold it too.
            raise RuntimeError(f"Step {self.step_name}: outside calls belong in work(), not in commit().")
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


def _no_work(ctx: StepContext) -> Output:
    return {}


def _keep_output(ctx: StepContext, output: Output) -> Output:
    return output


@dataclass(frozen=True)
class Step:
    """A step built from functions: `Step("name", "Title", work=..., commit=..., undo=...)`."""

    name: str
    title: str = ""
    work: Callable[[StepContext], Output] = _no_work
    commit: Callable[[StepContext, Output], Output | None] = _keep_output
    undo: Callable[[StepContext, Output], None] | None = None
    path: str = ""  # the dotted path it was loaded from, when it came from a plan
    check: Callable[[StepContext], None] | None = None  # before any step's work: could commit succeed?

    @property
    def label(self) -> str:
        return self.title or self.name


class BaseStep:
    """A base class for class-style steps: override `work`, `commit` and, if you can, `undo`."""

    name: str = ""
    title: str = ""
    undo: Callable[[StepContext, Output], None] | None = None

    def work(self, ctx: StepContext) -> Output:
        return {}

    def commit(self, ctx: StepContext, output: Output) -> Output | None:
        return output


def as_step(obj: Any, path: str = "") -> Step:
    """Return `obj` (a `Step`, a `BaseStep`, a class of either, or any object with the protocol's
    attributes) as a `Step`. Raise `TypeError` saying what is missing."""
    if isinstance(obj, type):
        obj = obj()
    if isinstance(obj, Step):
        return (
            obj if obj.path or not path else Step(obj.name, obj.title, obj.work, obj.commit, obj.undo, path, obj.check)
        )
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
    for attr, value in (("work", work), ("undo", undo), ("check", check)):
        if value is not None and not callable(value):
            raise TypeError(f"{where}: `{attr}` must be callable or absent.")
    return Step(name, str(getattr(obj, "title", "") or ""), work, commit, undo, path, check)


def commit_output(step: Step, ctx: StepContext, output: Output) -> Output:
    """Run `step.commit` and return the receipt's output (the work's output when commit returns None)."""
    result = step.commit(ctx, output)
    if result is None:
        return output
    if not isinstance(result, dict):
        raise PermanentFailure(f"Step {step.name}: commit() returned {type(result).__name__}, not a dict.")
    return result

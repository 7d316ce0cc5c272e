"""The one step protocol, and the parts of a step walk every runner shares.

    from weave.jobs import Step

A step is `Step(name, run, save=None, undo=None, check=None, title="", undo_run=None)`:

- `run(ctx)` does the slow part (outside calls carry the step's idempotency key) and writes nothing;
- `save(ctx, result)`, inside the guarded transaction that also writes the step's receipt, makes the
  step's own writes; what it returns (unless None) is the receipt's result;
- `undo_run(ctx, result)` and `undo(ctx, value)` compensate a saved step when a job is cancelled and
  undone, newest step first. `undo_run` is the undo's slow part, as `run` is the step's: it is given
  the receipt's result, makes the outside calls (a refund, a cancellation) outside any transaction
  (a slow one inside `ctx.heartbeat()`, as in `run`), and writes nothing. `undo` then makes the
  compensating writes inside the guarded transaction that marks the receipt undone, given what
  `undo_run` returned (the receipt's result where there is no `undo_run`). Either may be declared
  alone;
- `check(ctx)` runs for every step still to do before the attempt's first `run`, so an attempt never
  fails halfway for a reason it could have known at the start.

`run`, `undo_run` and `check` (and a job type's `handler`) may be coroutine functions (`async def`),
for an async client: the worker runs each to its end on an event loop of its own, as Django runs an
async task. `save` and `undo` may not: they run inside the guarded transaction, on the worker's own
database connection, which Django's ORM will not use from an event loop.

The core runner (`weave.jobs.runner`) and the onboarding app both walk their steps with the helpers
below: which steps are left after a phase, the phase a save expects, the checks, the heartbeat around
a step's work, the save's result, and the undo walk.
"""

import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync

from weave.leases import Heartbeat

# What each part of a step is called with, for the refusal of one that cannot take it.
_ARGUMENTS = {"run": "ctx", "save": "ctx, result", "undo": "ctx, value", "check": "ctx", "undo_run": "ctx, result"}


def accepts(function: Any, arguments: str) -> bool:
    """Whether `function` can be called with `arguments` ("ctx, result") given positionally; True where
    Python cannot read its signature (some builtins), which leaves it to the call."""
    try:
        inspect.signature(function).bind(*arguments.split(", "))
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def run_to_its_end(function: Any) -> Any:
    """`function` as a worker calls it: a coroutine function is run to its end on an event loop of its own
    (asgiref's `async_to_sync`, as Django runs an async task); anything else is returned as it is."""
    if not inspect.iscoroutinefunction(function):
        return function
    call = async_to_sync(function)

    @functools.wraps(function)
    def awaited(*args: Any) -> Any:
        return call(*args)

    return awaited


def _nothing_to_run(ctx: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Step:
    """One step of a job: `run` (the work), and optionally `save`, `undo`, `check` and `undo_run` (see the
    module)."""

    name: str
    run: Callable[[Any], Any] = _nothing_to_run
    save: Callable[[Any, Any], Any] | None = None
    undo: Callable[[Any, Any], None] | None = None
    check: Callable[[Any], None] | None = None
    title: str = ""
    undo_run: Callable[[Any, Any], Any] | None = None  # last: the fields before it keep their positions

    def __post_init__(self) -> None:
        for part, arguments in _ARGUMENTS.items():
            function = getattr(self, part)
            if function is not None and not accepts(function, arguments):
                raise TypeError(
                    f"Step {self.name!r}: {part} is called as {part}({arguments}), and "
                    # Its signature was read: `accepts` says yes to a function without one.
                    f"{getattr(function, '__qualname__', function)!s}{inspect.signature(function)} cannot take that."
                )
        for part in ("save", "undo"):
            if inspect.iscoroutinefunction(getattr(self, part)):
                raise TypeError(
                    f"Step {self.name!r}: {part} is a coroutine function (async def). It runs inside the guarded "
                    "transaction, on the worker's database connection, which Django's ORM will not use from an "
                    f"event loop: declare {part} with def. run, undo_run and check may be async."
                )
        for part in ("run", "undo_run", "check"):
            object.__setattr__(self, part, run_to_its_end(getattr(self, part)))

    @property
    def label(self) -> str:
        """What a person reads: the title, else the name."""
        return self.title or self.name

    @property
    def undoable(self) -> bool:
        """Whether "Cancel and undo" compensates this step (it declares `undo`, `undo_run` or both)."""
        return self.undo is not None or self.undo_run is not None

    def undo_value(self, ctx: Any, result: Any) -> Any:
        """Run the undo's slow part, if declared, and return what its writes are given (see the module)."""
        return result if self.undo_run is None else self.undo_run(ctx, result)


class PhaseError(LookupError):
    """A job's recorded phase (or a step) is not in its plan."""


def steps_after(steps: Sequence[Step], phase: str, *, noun: str = "job") -> list[Step]:
    """The steps still to do after `phase`, the last step whose save landed ("" for none yet)."""
    if not phase:
        return list(steps)
    names = [step.name for step in steps]
    if phase not in names:
        raise PhaseError(f"The {noun} is at phase {phase!r}, which its plan does not have.")
    return list(steps[names.index(phase) + 1 :])


def phase_before(steps: Sequence[Step], name: str, *, noun: str = "job") -> str:
    """The phase the save of step `name` expects: the step before it ("" for the first)."""
    names = [step.name for step in steps]
    if name not in names:
        raise PhaseError(f"Step {name} is not in the {noun}'s plan.")
    index = names.index(name)
    return names[index - 1] if index else ""


def check_steps(job: Any, steps: Iterable[Step], context_for: Callable[[Step], Any]) -> None:
    """Run every step's `check` before any work; `job.step` names the step being checked."""
    for step in steps:
        if step.check is not None:
            job.step = step.name
            step.check(context_for(step))


@contextmanager
def working(
    job: Any,
    *,
    background: bool = True,
    lost_wins_over: tuple[type[BaseException], ...] = (Exception,),
    made: Callable[[Heartbeat], object] | None = None,
) -> Iterator[Heartbeat]:
    """Keep `job`'s lease alive around a step's work: renewed before it, every ttl/3 during it, and
    once more right before the save. A lease lost meanwhile wins over an error the work raised.

    `made` is given the heartbeat before its first renewal (to keep it for a report or a test)."""
    heartbeat: Heartbeat = job.heartbeat(background=background)
    if made is not None:
        made(heartbeat)
    with heartbeat:
        try:
            yield heartbeat
        except lost_wins_over:
            heartbeat.check()
            raise
        heartbeat.before_save()


def saved_result(step: Step, ctx: Any, result: Any) -> Any:
    """Run `step.save` (if any) and return the receipt's result: what it returned, or `result` for None."""
    if step.save is None:
        return result
    returned = step.save(ctx, result)
    return result if returned is None else returned


@dataclass
class UndoWalk:
    """How an undo walk ended: the steps undone, those left (no undo), and why it stopped, if it did."""

    undone: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    stopped: str = ""  # "" (all done), "budget" (none left for the next undo) or "failed"
    failed_step: str = ""
    error: BaseException | None = None


def undo_steps(
    steps: Sequence[Step],
    saved: Iterable[Any],
    undo_one: Callable[[Step, Any], None],
    *,
    name_of: Callable[[Any], str],
    budget_left: Callable[[], float],
    failures: tuple[type[BaseException], ...],
) -> UndoWalk:
    """Undo each saved step (`saved`: their receipts, newest first) with `undo_one(step, receipt)`.

    A step without an undo is left in place; the walk stops when the budget is spent, or at the first
    undo that raises one of `failures`.
    """
    by_name = {step.name: step for step in steps}
    walk = UndoWalk()
    for receipt in saved:
        step = by_name.get(name_of(receipt))
        if step is None or not step.undoable:
            walk.left.append(name_of(receipt))
            continue
        if budget_left() <= 0:
            walk.stopped = "budget"
            return walk
        try:
            undo_one(step, receipt)
        except failures as error:
            walk.stopped, walk.failed_step, walk.error = "failed", step.name, error
            return walk
        walk.undone.append(step.name)
    return walk

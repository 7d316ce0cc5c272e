"""The plan: which steps a run takes, in order, from `WEAVE["ONBOARDING_STEPS"]` (dotted paths).

A run records its plan (the list of paths) when it starts, and every attempt loads that recorded
list: changing the setting shapes new runs only, never runs in flight.
"""

from collections.abc import Sequence
from functools import lru_cache

from django.utils.module_loading import import_string

from onboarding.steps.protocol import STEP_NAME_MAX, as_step
from weave.conf import DEFAULTS, weave_settings
from weave.jobs import Step

# The six built-in steps; runs from before plans were recorded took these too.
DEFAULT_PLAN: tuple[str, ...] = tuple(DEFAULTS["ONBOARDING_STEPS"])


class PlanError(ValueError):
    """A plan entry cannot be loaded, breaks the step protocol, or repeats a name."""


def configured_plan() -> list[str]:
    """The dotted paths a run started now records."""
    return [str(path) for path in weave_settings.ONBOARDING_STEPS]


@lru_cache(maxsize=64)
def _load(paths: tuple[str, ...]) -> tuple[Step, ...]:
    steps = []
    for path in paths:
        try:
            obj = import_string(path)
        except ImportError as exc:
            raise PlanError(f"{path!r} cannot be imported: {exc}") from exc
        try:
            steps.append(as_step(obj, path))
        except TypeError as exc:
            raise PlanError(str(exc)) from exc
    names = [step.name for step in steps]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise PlanError(f"step names must be unique; repeated: {', '.join(repeated)}")
    too_long = [name for name in names if len(name) > STEP_NAME_MAX]
    if too_long:
        raise PlanError(f"step names are at most {STEP_NAME_MAX} characters: {', '.join(too_long)}")
    if not steps:
        raise PlanError("the plan is empty")
    return tuple(steps)


def load_plan(paths: Sequence[str]) -> tuple[Step, ...]:
    """Load the steps named by `paths`, in order; raise `PlanError` saying which entry is wrong."""
    if isinstance(paths, str) or not all(isinstance(p, str) for p in paths):
        raise PlanError("a plan is a list of dotted-path strings")
    return _load(tuple(paths))

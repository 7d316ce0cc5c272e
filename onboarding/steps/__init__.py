"""Onboarding steps: the protocol a step follows, the plan that lists them, and the six built-ins.

from onboarding.steps import Step, BaseStep, StepContext, idempotency_key
from onboarding.steps.plan import DEFAULT_PLAN, load_plan
from onboarding.steps.builtin import STEPS, STEP_NAMES
"""

from typing import Any

from onboarding.steps.protocol import BaseStep, Output, Step, StepContext, StepLike, as_step, idempotency_key

__all__ = ["BaseStep", "Output", "Step", "StepContext", "StepLike", "as_step", "idempotency_key"]


def __getattr__(name: str) -> Any:
    # `onboarding.steps.STEPS` / `STEP_NAMES` (the built-ins) kept working for older imports, loaded
    # lazily: the built-in steps import models, and this package is imported before apps are ready.
    if name in ("STEPS", "STEP_NAMES"):
        from onboarding.steps import builtin

        return getattr(builtin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Onboarding steps: the protocol a step follows, the plan that lists them, and the six built-ins.

from onboarding.steps import Step, BaseStep, StepContext, load_plan
"""

from onboarding.steps.protocol import BaseStep, Output, Step, StepContext, StepLike, as_step, idempotency_key

__all__ = ["BaseStep", "Output", "Step", "StepContext", "StepLike", "as_step", "idempotency_key"]

"""An onboarding step's `work` may be a coroutine function (an async client); `commit` stays `def`."""

import asyncio

import pytest

from onboarding.models import StepReceipt
from onboarding.runner import claim_attempt
from onboarding.steps import Step
from onboarding.steps.builtin import STEPS
from tests.factories import OnboardingRunFactory

pytestmark = pytest.mark.django_db


async def look_up_rating(ctx):
    await asyncio.sleep(0)
    return {"rating": "A", "supplier": ctx.supplier.legal_name, "key": ctx.idempotency_key}


def test_async_work__is_awaited_under_the_heartbeat_and_its_output_committed(fake_services, clock):
    plan = (*STEPS[:1], Step("rate_supplier", "Rate the supplier", work=look_up_rating))
    run = OnboardingRunFactory()
    attempt = claim_attempt(run.pk, ttl=30.0, clock=clock, background=False, steps=plan)
    assert attempt.execute() == "completed"
    output = StepReceipt.objects.get(run=run, step="rate_supplier").output
    assert (output["rating"], output["supplier"]) == ("A", run.supplier.legal_name)
    assert output["key"].endswith(":rate_supplier")
    assert "rate_supplier" in attempt.heartbeats  # its work ran inside the step's heartbeat


def test_async_work__an_async_commit_is_refused_where_the_step_is_declared():
    async def commit(ctx, output):
        return None

    with pytest.raises(TypeError, match="save is a coroutine function"):
        Step("rate_supplier", work=look_up_rating, commit=commit)

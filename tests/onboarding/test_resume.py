"""A worker killed mid-run: the next claim marks it crashed and resumes after the last receipt."""

import pytest

from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.runner import claim_attempt
from onboarding.steps import Step, idempotency_key
from onboarding.steps.builtin import STEPS, register_bank_account
from tests.factories import OnboardingRunFactory

pytestmark = pytest.mark.django_db
TTL = 30.0


class Killed(BaseException):
    """Stands in for SIGKILL: nothing in the runner catches it, so nothing records an ending."""


def test_resume__killed_after_step_3_resumes_at_step_4(fake_services, clock):
    run = OnboardingRunFactory()
    first = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    for step in STEPS[:3]:
        first.run_step(step)
    # Killed here: the lease stays on the row until it expires.
    clock.advance(TTL + 1)

    second = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    assert [step.name for step in second.remaining_steps()] == [s.name for s in STEPS[3:]]
    for step in second.remaining_steps():
        second.run_step(step)
    second.complete()

    receipts = dict(StepReceipt.objects.filter(run=run).values_list("step", "fence"))
    assert receipts == {s.name: (1 if i < 3 else 2) for i, s in enumerate(STEPS)}
    assert dict(RunAttempt.objects.filter(run=run).values_list("fence", "outcome")) == {1: "crashed", 2: "completed"}
    # Each external call once, by the attempt that reached its step.
    endpoints = fake_services.stats()["endpoints"]
    assert {name: e["requests"] for name, e in endpoints.items()} == {
        "/tax-ids/verify": 1,
        "/sanctions/screen": 1,
        "/bank-accounts": 1,
    }


def test_resume__step_repeated_after_a_kill_calls_again_with_the_same_key(fake_services, clock):
    def work_then_die(ctx):
        register_bank_account.run(ctx)
        raise Killed  # the service registered the account; the worker died before its save

    dying = (*STEPS[:4], Step("register_bank_account", "dies", work=work_then_die), *STEPS[5:])
    run = OnboardingRunFactory()
    first = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=dying)
    with pytest.raises(Killed):
        first.execute()
    assert OnboardingRun.objects.get(pk=run.pk).phase == "set_payment_terms"
    clock.advance(TTL + 1)

    second = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    assert second.execute() == "completed"

    key = idempotency_key(run.pk, "register_bank_account")
    stats = fake_services.stats()
    bank = stats["endpoints"]["/bank-accounts"]
    # Called once per attempt that reached the step, with one key: the service did the work once.
    assert (bank["requests"], bank["unique_keys"], bank["replays"]) == (2, 1, 1)
    assert stats["keys"][key] == 2
    assert StepReceipt.objects.get(run=run, step="register_bank_account").output["idempotency_key"] == key
    assert stats["keys"][idempotency_key(run.pk, "verify_tax_id")] == 1
    assert dict(RunAttempt.objects.filter(run=run).values_list("fence", "outcome")) == {1: "crashed", 2: "completed"}

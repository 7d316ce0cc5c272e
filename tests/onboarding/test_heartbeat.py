"""Heartbeats around onboarding steps, on the fake clock: no sleeping, time moves by advance()."""

from datetime import timedelta

import pytest
from django.db.models import F

from onboarding.errors import TemporaryFailure
from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.runner import claim_attempt
from onboarding.steps import Step, StepContext
from onboarding.steps.builtin import STEPS, verify_tax_id
from tests.factories import OnboardingRunFactory
from weave.leases import LeaseLost

pytestmark = pytest.mark.django_db
TTL = 30.0


def slow_step(during=None, after=None):
    """The real first step, with `during(ctx)` run in its slow part before the real HTTP call, `after` after it."""

    def work(ctx: StepContext):
        if during:
            during(ctx)
        output = verify_tax_id.run(ctx)
        if after:
            after(ctx)
        return output

    return (Step("verify_tax_id", "Verify tax id (slow)", work=work), *STEPS[1:])


def test_step__renews_before_every_third_of_the_ttl_and_right_before_the_save(fake_services, clock):
    def during(ctx):
        for _ in range(2):
            clock.advance(TTL / 3)
            assert ctx.heartbeat.tick() is True
        clock.advance(4)
        assert ctx.heartbeat.tick() is False  # only 4 s since the last renewal

    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=slow_step(during))
    clock.advance(1)
    worker.run_step(worker.steps[0])

    # Before the work (t=1), at each ttl/3 during it (11, 21), right before the save (25).
    assert worker.heartbeats["verify_tax_id"].renewals == [1.0, 11.0, 21.0, 25.0]
    row = OnboardingRun.objects.get(pk=run.pk)
    assert row.lease_expires_at == clock.current + timedelta(seconds=TTL)
    assert row.phase == "verify_tax_id"


def test_step__failed_renewal_mid_step_ends_blocked_though_the_work_returned(fake_services, clock):
    def after(ctx):
        # Stolen as from psql: another owner, the next fence, a future expiry.
        OnboardingRun.objects.filter(pk=ctx.run.pk).update(
            owner="thief", fence=F("fence") + 1, lease_expires_at=clock.current + timedelta(hours=1)
        )
        clock.advance(TTL / 3)
        ctx.heartbeat.tick()

    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=slow_step(after=after))

    assert worker.execute() == "blocked"

    # The slow part did its work and the service answered...
    assert fake_services.stats()["endpoints"]["/tax-ids/verify"]["unique_keys"] == 1
    # ...but the failed renewal won: no save, no receipt, the thief's row untouched.
    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.phase, row.owner, row.fence, row.status) == ("", "thief", 2, "running")
    assert not StepReceipt.objects.filter(run=run).exists()
    blocked = RunAttempt.objects.get(run=run)
    assert blocked.outcome == "blocked"
    assert "thief at fence 2" in blocked.reason and "verify_tax_id" in blocked.reason


def test_step__failed_renewal_mid_step_wins_over_the_works_own_temporary_failure(fake_services, clock):
    def after(ctx):
        OnboardingRun.objects.filter(pk=ctx.run.pk).update(
            owner="thief", fence=F("fence") + 1, lease_expires_at=clock.current + timedelta(hours=1)
        )
        clock.advance(TTL / 3)
        ctx.heartbeat.tick()  # refused: the thief holds the run
        raise TemporaryFailure("the service went away")

    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=slow_step(after=after))

    # Not "released" for a retry: the stale worker lost the run, so it writes nothing but its own ending.
    assert worker.execute() == "blocked"
    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.owner, row.fence, row.status, row.reason, row.next_attempt_at) == ("thief", 2, "running", "", None)
    blocked = RunAttempt.objects.get(run=run)
    assert blocked.outcome == "blocked" and "thief at fence 2" in blocked.reason


def test_lease__lapsed_cannot_be_renewed_and_a_new_claim_gets_the_next_fence(fake_services, clock):
    run = OnboardingRunFactory()
    first = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    lease = first.lease
    clock.advance(TTL + 1)

    with pytest.raises(LeaseLost, match="expired"):
        OnboardingRun.objects.renew(lease, ttl=TTL, clock=clock)
    # The heartbeat's first renewal fails the same way, so the step never starts.
    with pytest.raises(LeaseLost, match="expired"):
        first.run_step(first.steps[0])
    assert not StepReceipt.objects.exists()

    second = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    assert second.execute() == "completed"
    assert second.lease.fence == lease.fence + 1
    # The first attempt never ended, so the second claim recorded it as crashed.
    outcomes = dict(RunAttempt.objects.filter(run=run).values_list("fence", "outcome"))
    assert outcomes == {1: "crashed", 2: "completed"}


def test_budget__spent_between_steps_releases_and_requeues(fake_services, clock, django_capture_on_commit_callbacks):
    def during(ctx):
        for _ in range(4):  # 45 s of work, renewed each third of the ttl until the budget is spent
            clock.advance(TTL / 3)
            ctx.heartbeat.tick()
        clock.advance(5)

    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=TTL, budget=40, clock=clock, background=False, steps=slow_step(during))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert worker.execute() == "released"

    # No renewal once the budget ran out at 40 s; the lease from the 30 s renewal still covered the save.
    assert worker.heartbeats["verify_tax_id"].renewals == [0.0, 10.0, 20.0, 30.0]
    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.status, row.phase, row.owner) == ("pending", "verify_tax_id", None)
    assert "budget" in RunAttempt.objects.get(run=run).reason
    assert len(callbacks) == 1  # the re-enqueue, sent once the release commits


def test_reason__a_failure_quoting_the_sites_configured_secret_is_stored_without_it(fake_services, clock, settings):
    """The run's reason and its attempt's reason are stored redacted, as the core runner's are: a service's
    error may quote a configured credential, and the admin and `weave_explain` show what is stored."""
    settings.WEAVE = {**settings.WEAVE, "PUSH_TOKEN": "tok-0123456789abcdef"}

    def after(ctx):
        raise TemporaryFailure("the service refused our token tok-0123456789abcdef")

    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=slow_step(after=after))
    worker.execute()
    row = OnboardingRun.objects.get(pk=run.pk)
    attempt = RunAttempt.objects.get(run=run)
    stored = [row.reason, attempt.reason]
    assert all("tok-0123456789abcdef" not in text and "[redacted]" in text for text in stored), stored

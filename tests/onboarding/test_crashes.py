"""A run whose attempts keep crashing at one step fails instead of taking a worker down at every lapse."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.runner import CRASHED_IN_A_ROW, claim_attempt
from onboarding.services import onboarding_retry
from onboarding.steps import Step
from onboarding.steps.builtin import STEPS
from tests.factories import OnboardingRunFactory

pytestmark = pytest.mark.django_db
TTL = 30.0


class Killed(BaseException):
    """Stands in for SIGKILL (or running out of memory): nothing in the runner catches it."""


def dies_at_bank(ctx):
    raise Killed


DYING = (*STEPS[:4], Step("register_bank_account", "dies", work=dies_at_bank), *STEPS[5:])


def attempt(run, clock, steps=None):
    return claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=steps)


def killed(run, clock, steps=DYING):
    with pytest.raises(Killed):
        attempt(run, clock, steps).execute()
    clock.advance(TTL + 1)  # its lease lapses


def outcomes(run):
    return list(RunAttempt.objects.filter(run=run).order_by("fence").values_list("fence", "outcome"))


def test_crashes__three_attempts_dead_at_one_step_fail_the_run_without_starting_it_again(fake_services, clock):
    assert CRASHED_IN_A_ROW == 3
    run = OnboardingRunFactory()
    killed(run, clock)  # saves steps 1 to 4, then dies at the bank step
    for _ in range(CRASHED_IN_A_ROW):
        killed(run, clock)  # dies at the bank step, having saved nothing
    before = fake_services.stats()["endpoints"]

    assert attempt(run, clock).execute() == "failed"

    assert fake_services.stats()["endpoints"] == before  # no step ran: no call went out
    run.refresh_from_db()
    assert (run.status, run.failed_step, run.failure_fixable, run.owner) == (
        "failed",
        "register_bank_account",
        True,
        None,
    )
    assert run.reason == (
        "register_bank_account: Not started: the last 3 attempts crashed without saving a step (their workers "
        "stopped or died while holding the run, and never came back). Retry the run once the cause is fixed."
    )
    assert outcomes(run) == [(1, "crashed"), (2, "crashed"), (3, "crashed"), (4, "crashed"), (5, "failed")]
    assert not StepReceipt.objects.filter(run=run, step="register_bank_account").exists()


def test_crashes__fewer_crashes_in_a_row_than_the_limit_are_taken_over_and_run(fake_services, clock):
    run = OnboardingRunFactory()
    killed(run, clock)
    killed(run, clock)
    assert attempt(run, clock).execute() == "completed"
    assert outcomes(run) == [(1, "crashed"), (2, "crashed"), (3, "completed")]


def test_crashes__an_attempt_that_saved_a_step_before_it_crashed_ends_the_count(fake_services, clock):
    """Three crashes in a row, but the oldest saved four steps first: the run was moving, so the fourth
    attempt runs."""
    run = OnboardingRunFactory()
    killed(run, clock)  # saves steps 1 to 4, then dies at the bank step
    killed(run, clock)
    killed(run, clock)
    assert attempt(run, clock).execute() == "completed"
    assert outcomes(run)[-1] == (4, "completed")


def test_crashes__a_worker_that_only_stalled_is_not_counted(fake_services, clock):
    """A stalled worker writes its own ending (blocked) when it wakes: the run was not what stopped it."""
    run = OnboardingRunFactory()
    for _ in range(1 + CRASHED_IN_A_ROW):
        killed(run, clock)
    # The second-newest attempt's worker had only stalled: it woke, was refused, and said so.
    newest = RunAttempt.objects.filter(run=run).order_by("-fence")
    RunAttempt.objects.filter(pk=newest[1].pk).update(outcome="blocked")
    assert attempt(run, clock).execute() == "completed"


def test_crashes__a_retry_after_the_fix_resumes_the_run(fake_services, clock):
    run = OnboardingRunFactory()
    for _ in range(1 + CRASHED_IN_A_ROW):
        killed(run, clock)
    assert attempt(run, clock).execute() == "failed"
    fixer = get_user_model().objects.create_user(username="fixer", password="x", is_staff=True)
    fixer.user_permissions.set(Permission.objects.filter(codename__in=["retry_run", "change_onboardingrun"]))
    fixer = get_user_model().objects.get(pk=fixer.pk)
    onboarding_retry(run=OnboardingRun.objects.get(pk=run.pk), retried_by=fixer, why="Worker memory raised.")
    assert attempt(run, clock).execute() == "completed"
    assert outcomes(run)[-1] == (7, "completed")  # the retry took fence 6, its claim 7
    assert StepReceipt.objects.get(run=run, step="register_bank_account").fence == 7

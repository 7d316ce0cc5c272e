"""A worker cannot skip or repeat a step: a save whose expected phase is wrong matches no row."""

import pytest

from onboarding.models import OnboardingRun, StepReceipt, VendorRecord
from onboarding.runner import claim_attempt
from onboarding.steps.builtin import STEPS
from tests.factories import OnboardingRunFactory
from weave.leases import LeaseLost

pytestmark = pytest.mark.django_db
TTL = 30.0


@pytest.fixture
def claimed(fake_services, clock):
    run = OnboardingRunFactory()
    worker = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    return worker


def snapshot(pk):
    return OnboardingRun.objects.values().get(pk=pk)


def test_phase__the_raw_guarded_save_with_a_wrong_phase_changes_no_row(claimed, clock):
    before = snapshot(claimed.run_id)
    guarded = OnboardingRun.objects.held_by(claimed.lease, clock).filter(phase="screen_sanctions", status="running")
    assert guarded.update(phase="create_vendor_record") == 0
    with pytest.raises(LeaseLost, match="phase=''"):
        OnboardingRun.objects.guarded_update(
            claimed.lease, clock=clock, expect={"phase": "screen_sanctions"}, phase="create_vendor_record"
        )
    assert snapshot(claimed.run_id) == before


def test_phase__skipping_a_step_is_refused_and_rolls_back_its_writes(claimed):
    create_vendor = STEPS[2]  # expects phase "screen_sanctions"; the run is at ""
    with pytest.raises(LeaseLost, match="expected 'screen_sanctions'"):
        claimed.run_step(create_vendor)
    assert snapshot(claimed.run_id)["phase"] == ""
    assert not VendorRecord.objects.exists()
    assert not StepReceipt.objects.exists()


def test_phase__repeating_a_step_is_refused(claimed, fake_services):
    claimed.run_step(STEPS[0])
    claimed.run.phase = ""  # a confused worker that thinks step 1 is still to do
    with pytest.raises(LeaseLost, match="phase='verify_tax_id'"):
        claimed.run_step(STEPS[0])
    assert StepReceipt.objects.filter(step="verify_tax_id").count() == 1
    assert snapshot(claimed.run_id)["phase"] == "verify_tax_id"

"""Steps a site defines: the plan setting, the recorded plan, the system check, and the docs' example step."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.db.models import F

from demo.models import ErpVendor
from onboarding.models import OnboardingRun, StepReceipt, VendorRecord
from onboarding.runner import claim_attempt, run_onboarding
from onboarding.services import onboarding_start
from onboarding.steps import BaseStep, Step, StepContext
from onboarding.steps.builtin import STEP_NAMES
from onboarding.steps.plan import DEFAULT_PLAN, PlanError, load_plan
from tests.factories import SupplierFactory
from weave.leases import LeaseLost

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
ERP = "demo.steps.CreateErpVendor"
WITH_ERP = [*DEFAULT_PLAN[:3], ERP, *DEFAULT_PLAN[3:]]
TTL = 30.0


@pytest.fixture
def erp_plan(settings, fake_services):
    settings.WEAVE = {**settings.WEAVE, "ONBOARDING_STEPS": WITH_ERP}
    return WITH_ERP


def test_docs__the_write_your_own_step_example_is_the_tested_demo_step():
    page = (ROOT / "docs" / "onboarding" / "steps.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert (ROOT / "demo" / "steps.py").read_text() in blocks, "the docs' example must be demo/steps.py verbatim"


def test_plan__the_default_is_the_six_built_in_steps():
    assert [step.name for step in load_plan(DEFAULT_PLAN)] == list(STEP_NAMES)


def test_custom_step__runs_in_its_place_and_its_row_is_written_by_the_receipts_fence(erp_plan):
    run = onboarding_start(supplier=SupplierFactory(country="DE"), started_by=None)
    assert run.plan == erp_plan  # recorded when it started

    assert run_onboarding(run.pk, background=False) == "completed"

    receipts = list(StepReceipt.objects.filter(run=run).values_list("step", "fence", "output"))
    assert [step for step, _, _ in receipts] == [*STEP_NAMES[:3], "create_erp_vendor", *STEP_NAMES[3:]]
    erp = ErpVendor.objects.get(supplier=run.supplier)
    vendor = VendorRecord.objects.get(supplier=run.supplier)
    assert erp.erp_code == f"ERP-DE-{vendor.vendor_number}"  # read from the earlier receipt's output
    receipt = next(output for step, _, output in receipts if step == "create_erp_vendor")
    assert (erp.run_id, erp.fence) == (run.pk, 1) and receipt == {"erp_code": erp.erp_code, "created": True}


def test_custom_step__a_stale_worker_writes_no_row(erp_plan, clock):
    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    stale = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, owner="stale")
    for step in stale.steps[:3]:
        stale.run_step(step)
    clock.advance(TTL + 1)
    OnboardingRun.objects.filter(pk=run.pk).update(
        owner="thief", fence=F("fence") + 1, lease_expires_at=clock.current + timedelta(hours=1)
    )
    with pytest.raises(LeaseLost, match="thief at fence 2"):
        stale.run_step(stale.steps[3])
    assert not ErpVendor.objects.exists()
    assert not StepReceipt.objects.filter(step="create_erp_vendor").exists()


def test_plan__changing_the_setting_never_reshapes_a_run_in_flight(settings, fake_services, clock):
    settings.WEAVE = {**settings.WEAVE, "ONBOARDING_STEPS": list(DEFAULT_PLAN)}
    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    first = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False)
    first.run_step(first.steps[0])
    first.give_back("stopped for the test", requeue=False)

    settings.WEAVE = {**settings.WEAVE, "ONBOARDING_STEPS": WITH_ERP}  # a deploy with a new step
    assert run_onboarding(run.pk, clock=clock, background=False) == "completed"
    assert list(StepReceipt.objects.filter(run=run).values_list("step", flat=True)) == list(STEP_NAMES)
    assert not ErpVendor.objects.exists()
    # A run started now takes the new plan.
    assert onboarding_start(supplier=SupplierFactory(), started_by=None).plan == WITH_ERP


def test_plan__a_run_whose_recorded_step_is_gone_fails_saying_so(fake_services):
    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    OnboardingRun.objects.filter(pk=run.pk).update(plan=[*DEFAULT_PLAN[:2], "mysite.steps.removed_step"])
    assert run_onboarding(run.pk, background=False) == "failed"
    run.refresh_from_db()
    assert "recorded plan cannot be loaded" in run.reason and "mysite.steps.removed_step" in run.reason
    assert not StepReceipt.objects.filter(run=run).exists()  # refused before any step


class NoCommit:
    name = "no_commit"


class Twin(BaseStep):
    name = "verify_tax_id"


twin = Twin()
not_a_step = 42
function_step = Step("function_step", commit=lambda ctx, output: {"ok": True})


@pytest.mark.parametrize(
    ("plan", "says"),
    [
        (["onboarding.steps.builtin.nope"], "cannot be imported"),
        (["no.such.module.step"], "cannot be imported"),
        (["tests.onboarding.test_plan.NoCommit"], "callable `commit"),
        (["tests.onboarding.test_plan.not_a_step"], "non-empty str `name`"),
        ([DEFAULT_PLAN[0], "tests.onboarding.test_plan.twin"], "repeated: verify_tax_id"),
        ([], "empty"),
    ],
)
def test_system_check__refuses_a_plan_that_cannot_run(settings, plan, says):
    settings.WEAVE = {"ONBOARDING_STEPS": plan}
    errors = [e for e in run_checks() if e.id == "onboarding.E003"]
    assert len(errors) == 1 and says in errors[0].msg


@pytest.mark.parametrize("plan", [ERP, [ERP, 3]])
def test_system_check__a_plan_that_is_not_a_list_of_strings_is_a_settings_error(settings, plan):
    settings.WEAVE = {"ONBOARDING_STEPS": plan}
    errors = [e for e in run_checks() if e.id in ("weave.E006", "onboarding.E003")]
    assert [e.id for e in errors] == ["weave.E006"] and "ONBOARDING_STEPS" in errors[0].msg


def test_system_check__accepts_functions_classes_and_objects(settings):
    settings.WEAVE = {
        **settings.WEAVE,
        "ONBOARDING_STEPS": [*DEFAULT_PLAN, ERP, "tests.onboarding.test_plan.function_step"],
    }
    assert not [e for e in run_checks() if e.id.startswith("onboarding.")]
    steps = load_plan(settings.WEAVE["ONBOARDING_STEPS"])
    assert [s.name for s in steps[-2:]] == ["create_erp_vendor", "function_step"]
    assert steps[-2].undo is not None and steps[-1].undo is None


def test_step_context__refuses_outside_calls_inside_the_guarded_transaction(fake_services, clock):
    def calls_out(ctx: StepContext, output):
        ctx.post("/sanctions/screen", {"name": "x", "country": "DE"})

    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    steps = (Step("calls_out_in_commit", commit=calls_out),)
    with pytest.raises(RuntimeError, match="belong in work"):
        claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, steps=steps).run_step(steps[0])
    assert not StepReceipt.objects.exists()
    assert fake_services.stats()["requests"] == 0


def test_plan_error_names_the_entry():
    with pytest.raises(PlanError, match="'x.y' cannot be imported"):
        load_plan(["x.y"])

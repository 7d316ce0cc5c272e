"""The demo's scripted operator: a failed run fixed by a retry, and a started run, told as a person's actions."""

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command

from demo.management.commands.weave_demo_data import CLOSED_ACCOUNT_IBAN, CORRECTED_IBAN, SUPPLIERS
from onboarding.explain import explain_run
from onboarding.models import OnboardingRun, Supplier
from onboarding.runner import run_onboarding

pytestmark = pytest.mark.django_db


def test_demo_operator__fixes_the_closed_account_and_retries_the_failed_run_as_a_named_user(fake_services):
    fake_services.config.refused_ibans = [CLOSED_ACCOUNT_IBAN]
    call_command("weave_demo_data")  # the suppliers; it starts the closed-account supplier's run, by demo-operator
    run = OnboardingRun.objects.get(supplier__iban=CLOSED_ACCOUNT_IBAN)
    assert run_onboarding(run.pk, background=False) == "failed"

    call_command("weave_demo_operator", start_after=0.0, fix_after=0.0, once=True)

    supplier = Supplier.objects.get(legal_name=SUPPLIERS[-1][0])
    assert supplier.iban == CORRECTED_IBAN
    run.refresh_from_db()
    assert run.status == OnboardingRun.Status.PENDING and run.fence == 2  # re-opened through the lease core
    assert run_onboarding(run.pk, background=False) == "completed"
    story = explain_run(run.pk).as_text()
    assert re.search(r"started\s+by demo-operator: Started onboarding for Faulty Fixtures Co", story)
    reopened = r"reopened\s+by demo-operator: Re-opened under fence 2 \(it failed at fence 1\): IBAN corrected"
    assert re.search(reopened, story)
    assert "2 re-opened by demo-operator's retry; 3 claimed by" in story
    # The IBAN change is in the supplier's own history, by the same user.
    assert LogEntry.objects.filter(object_id=str(supplier.pk), user__username="demo-operator").exists()
    # ... and one more supplier was started by it (the first by name), the rest are left to the visitor.
    started = OnboardingRun.objects.exclude(pk=run.pk)
    assert [r.supplier.legal_name for r in started] == [sorted(s[0] for s in SUPPLIERS)[0]]
    assert started[0].created_by.username == "demo-operator"


def test_demo_operator__leaves_a_failed_run_alone_until_it_has_been_failed_a_while(fake_services):
    fake_services.config.refused_ibans = [CLOSED_ACCOUNT_IBAN]
    call_command("weave_demo_data")
    run = OnboardingRun.objects.get(supplier__iban=CLOSED_ACCOUNT_IBAN)
    assert run_onboarding(run.pk, background=False) == "failed"
    from demo.management.commands.weave_demo_operator import Command

    assert Command().fix_failed(fix_after=600.0) is False
    run.refresh_from_db()
    assert run.status == OnboardingRun.Status.FAILED

"""Run pages are read-only (no Save or Delete), and operator actions are written to the admin history."""

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from onboarding.models import OnboardingRun, Supplier
from onboarding.runner import claim_attempt
from tests.factories import OnboardingRunFactory, SupplierFactory

pytestmark = pytest.mark.django_db
RUNS = reverse("admin:weave_onboarding_onboardingrun_changelist")
SUPPLIERS = reverse("admin:weave_onboarding_supplier_changelist")


def test_run_page__has_no_save_or_delete_and_a_post_writes_nothing(admin_client, fake_services):
    run = OnboardingRunFactory()
    claim_attempt(run.pk, background=False)  # a worker holds the run under a live lease
    url = reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk])
    html = admin_client.get(url).content.decode()
    assert 'name="_save"' not in html and "deletelink" not in html
    before = OnboardingRun.objects.values().get(pk=run.pk)
    response = admin_client.post(url, {"reason": "edited", "created_by": ""})
    assert response.status_code == 403
    assert OnboardingRun.objects.values().get(pk=run.pk) == before
    delete = reverse("admin:weave_onboarding_onboardingrun_delete", args=[run.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert OnboardingRun.objects.filter(pk=run.pk).exists()


def test_operator_actions__start_resume_cancel_are_in_the_admin_history(admin_client):
    supplier = SupplierFactory()
    admin_client.post(SUPPLIERS, {"action": "start_onboarding", "_selected_action": [supplier.pk], "index": 0})
    run = OnboardingRun.objects.get(supplier=supplier)
    admin_client.post(RUNS, {"action": "resume", "_selected_action": [run.pk], "index": 0})
    admin_client.post(RUNS, {"action": "cancel", "_selected_action": [run.pk], "index": 0})
    messages = [(e.content_type.model_class(), e.object_id, e.get_change_message()) for e in LogEntry.objects.all()]
    assert (Supplier, str(supplier.pk), f"Started onboarding run {run.pk}.") in messages
    assert (OnboardingRun, str(run.pk), f"Started onboarding for {supplier}.") in messages
    assert (OnboardingRun, str(run.pk), "Resumed at fence 0: a worker was enqueued now.") in messages
    assert (OnboardingRun, str(run.pk), "Cancelled (it was pending at fence 0).") in messages

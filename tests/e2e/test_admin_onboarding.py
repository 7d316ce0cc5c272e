"""An admin "Start onboarding" through the test client, completed by a real qcluster against the fake services."""

import pytest
from django.urls import reverse

from notifications.models import Notification
from notifications.testing.fake_provider import FakePushProvider
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, StepReceipt, Supplier, VendorRecord
from onboarding.steps.builtin import STEP_NAMES
from onboarding.testing.fake_services import FakeSupplierServices
from tools.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_admin_start_onboarding__a_real_qcluster_completes_the_run(admin_client, groups, worker_env):
    supplier = Supplier.objects.create(
        legal_name="Acme Fasteners GmbH",
        country="DE",
        tax_id="DE811907980",  # well-formed: validation refuses a bad checksum before any run
        contact_email="ap@acme.example",
        device_token="acme-device",
        iban="DE89370400440532013000",
    )
    with FakeSupplierServices() as services, FakePushProvider() as push:
        env = {**worker_env, "WEAVE_SUPPLIER_API_URL": services.url, "WEAVE_PUSH_URL": push.push_url}
        cluster = groups.manage("qcluster", "qcluster", env=env)

        response = admin_client.post(
            reverse("admin:weave_onboarding_supplier_changelist"),
            {"action": "start_onboarding", "_selected_action": [supplier.pk]},
            follow=True,
        )
        assert response.status_code == 200
        assert "Acme Fasteners GmbH" in " ".join(str(m) for m in response.context["messages"])

        def completed() -> bool:
            assert cluster.alive(), cluster.log_tail()
            run = OnboardingRun.objects.filter(supplier=supplier).first()
            return run is not None and run.status == OnboardingRun.Status.COMPLETED

        wait_until(completed, timeout=120, message="the onboarding run to complete")
        welcome = Notification.objects.get(data__onboarding_run_id=OnboardingRun.objects.get(supplier=supplier).pk)
        wait_until(
            lambda: Notification.objects.get(pk=welcome.pk).status == Notification.Status.DELIVERED,
            timeout=90,
            message="the welcome notification to be delivered",
        )

    run = OnboardingRun.objects.get(supplier=supplier)
    receipts = list(StepReceipt.objects.filter(run=run).order_by("completed_at"))
    assert [r.step for r in receipts] == list(STEP_NAMES)
    assert run.owner is None and run.phase == STEP_NAMES[-1]
    for model in (VendorRecord, PaymentTerms, BankAccount):
        row = model.objects.get(supplier=supplier)
        assert (row.run_id, row.fence) == (run.pk, run.fence)

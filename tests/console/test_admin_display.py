"""The admin as an operator reads it: reasons, the failed step, times with seconds and zone, links, no dead buttons."""

import re

import pytest
from django.urls import reverse

from onboarding.models import OnboardingRun, RunAttempt, StepReceipt, VendorRecord
from tests.factories import NotificationFactory, OnboardingRunFactory
from weave.telemetry import db_now

pytestmark = pytest.mark.django_db
SECONDS_AND_ZONE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


@pytest.fixture
def failed_run():
    run = OnboardingRunFactory()
    now = db_now()
    OnboardingRun.objects.filter(pk=run.pk).update(
        status="failed",
        phase="set_payment_terms",
        failed_step="register_bank_account",
        reason="Bank account refused: IBAN is closed",
        finished_at=now,
    )
    StepReceipt.objects.create(
        run=run, step="create_vendor_record", fence=1, owner="w", completed_at=now, output={"vendor_number": "V-1"}
    )
    VendorRecord.objects.create(supplier=run.supplier, vendor_number="V-1", run=run, fence=1, created_at=now)
    StepReceipt.objects.create(
        run=run,
        step="send_welcome_notification",
        fence=1,
        owner="w",
        completed_at=now,
        output={
            "notification_id": NotificationFactory(
                data={"onboarding_run_id": run.pk, "supplier_id": run.supplier_id}
            ).pk
        },
    )
    RunAttempt.objects.create(
        run=run,
        fence=1,
        owner="w",
        started_at=now,
        ended_at=now,
        outcome="failed",
        reason="Bank account refused: IBAN is closed",
    )
    return OnboardingRun.objects.get(pk=run.pk)


def test_run_list__reason_and_the_step_a_failed_run_failed_at(admin_client, failed_run):
    page = admin_client.get(reverse("admin:weave_onboarding_onboardingrun_changelist")).content.decode()
    assert "failed at register_bank_account" in page
    assert "Bank account refused: IBAN is closed" in page
    assert SECONDS_AND_ZONE.search(page)
    assert 'value="delete_selected"' not in page  # the bulk delete that could only fail is gone


def test_run_page__links_to_supplier_rows_and_welcome_notification_with_no_save_or_delete(admin_client, failed_run):
    page = admin_client.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[failed_run.pk])).content
    page = page.decode()
    assert reverse("admin:weave_onboarding_supplier_change", args=[failed_run.supplier_id]) in page
    vendor = VendorRecord.objects.get(run=failed_run)
    assert reverse("admin:weave_onboarding_vendorrecord_change", args=[vendor.pk]) in page
    notification_id = StepReceipt.objects.get(run=failed_run, step="send_welcome_notification").output[
        "notification_id"
    ]
    assert reverse("admin:weave_notifications_notification_change", args=[notification_id]) in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    assert "deletelink" not in page
    assert len(SECONDS_AND_ZONE.findall(page)) >= 3


def test_notification_page__links_back_to_its_run_and_supplier(admin_client, failed_run):
    receipt = StepReceipt.objects.get(run=failed_run, step="send_welcome_notification")
    url = reverse("admin:weave_notifications_notification_change", args=[receipt.output["notification_id"]])
    page = admin_client.get(url).content.decode()
    assert reverse("admin:weave_onboarding_onboardingrun_change", args=[failed_run.pk]) in page
    assert reverse("admin:weave_onboarding_supplier_change", args=[failed_run.supplier_id]) in page
    assert SECONDS_AND_ZONE.search(page)


def test_supplier_list__links_to_its_latest_run(admin_client, failed_run):
    page = admin_client.get(reverse("admin:weave_onboarding_supplier_changelist")).content.decode()
    assert reverse("admin:weave_onboarding_onboardingrun_change", args=[failed_run.pk]) in page
    assert f"supplier__id__exact={failed_run.supplier_id}" in page


def test_run_pages_reload_while_a_run_is_active_and_stop_when_it_finished(admin_client, failed_run):
    active = OnboardingRunFactory()
    change = "admin:weave_onboarding_onboardingrun_change"
    # The reload is the script's (weave/console.js), which keeps focus and scroll; never a meta refresh.
    reloading = 'data-weave-refresh="2"'
    page = admin_client.get(reverse(change, args=[active.pk])).content.decode()
    assert reloading in page and 'http-equiv="refresh"' not in page
    assert reloading not in admin_client.get(reverse(change, args=[failed_run.pk])).content.decode()
    changelist = reverse("admin:weave_onboarding_onboardingrun_changelist")
    assert reloading in admin_client.get(changelist).content.decode()
    OnboardingRun.objects.filter(pk=active.pk).update(status="cancelled")
    assert reloading not in admin_client.get(changelist).content.decode()


def test_breaker_openings_are_listed_read_only_with_their_reason(admin_client):
    from notifications.models import BreakerOpening

    BreakerOpening.objects.create(opened_at=db_now(), owner="push:h:1:x", reason="Circuit breaker opened: HTTP 401")
    page = admin_client.get(reverse("admin:weave_notifications_breakeropening_changelist")).content.decode()
    assert "Circuit breaker opened: HTTP 401" in page and SECONDS_AND_ZONE.search(page)
    assert 'value="delete_selected"' not in page


def test_key_values__stored_data_as_stored_and_a_step_output_in_words():
    from weave.operations import key_values, linked_ids

    data = {"order_id": "A-17", "paid": True, "lines": [1, 2]}
    stored = key_values(data)
    assert '<th scope="row">order_id</th><td>A-17</td>' in stored and "<td>[1, 2]</td>" in stored
    assert "<td>true</td>" in stored
    words = key_values(data, words=True)
    assert '<th scope="row">order id</th>' in words and "<td>yes</td>" in words and "<td>1, 2</td>" in words
    assert key_values({}) == "—" and key_values("plain text") == "plain text"
    assert str(linked_ids(OnboardingRun, list(range(1, 25)))).endswith(" and 4 more")


def test_run_list_filters__blocked_attempts_lease_and_status(admin_client, failed_run):
    other = OnboardingRunFactory()
    now = db_now()
    RunAttempt.objects.create(run=other, fence=1, owner="w", started_at=now, ended_at=now, outcome="blocked")
    OnboardingRun.objects.filter(pk=other.pk).update(owner="w", fence=1, lease_expires_at=now)
    url = reverse("admin:weave_onboarding_onboardingrun_changelist")

    def listed(query):
        return {run.pk for run in admin_client.get(url + query).context["cl"].result_list}

    assert listed("?blocked=yes") == {other.pk} and listed("?blocked=no") == {failed_run.pk}
    assert listed("?lease=expired") == {other.pk} and listed("?lease=free") == {failed_run.pk}
    assert listed("?lease=live") == set() and listed("?status__exact=failed") == {failed_run.pk}

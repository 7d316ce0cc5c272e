"""The shared admin pieces: lease state by the database clock, read-only rows, one timeline per job."""

import pytest
from django.contrib import admin
from django.test import RequestFactory

from notifications.models import DeliveryAttempt, Notification
from onboarding.models import OnboardingRun, RunAttempt
from tests.factories import NotificationFactory
from weave.admin import LeasedModelAdmin, ReadOnlyAdminMixin

pytestmark = pytest.mark.django_db


def test_both_job_admins_share_the_leased_admin_and_receipts_are_read_only():
    for model in (Notification, OnboardingRun):
        assert isinstance(admin.site._registry[model], LeasedModelAdmin)
    for model in (DeliveryAttempt, RunAttempt):
        model_admin = admin.site._registry[model]
        assert isinstance(model_admin, ReadOnlyAdminMixin)
        request = RequestFactory().get("/")
        assert not any(
            check(request)
            for check in (
                model_admin.has_add_permission,
                model_admin.has_change_permission,
                model_admin.has_delete_permission,
            )
        )


def test_lease_state__free_live_and_expired_even_without_the_annotation():
    model_admin = admin.site._registry[Notification]
    free, live, expired = NotificationFactory(), NotificationFactory(), NotificationFactory()
    Notification.objects.claim(live.pk, owner="w-live", ttl=60)
    Notification.objects.claim(expired.pk, owner="w-gone", ttl=-1)  # already past by the database clock
    plain = {row.pk: row for row in Notification.objects.all()}  # no lease_live annotation
    annotated = {row.pk: row for row in model_admin.get_queryset(RequestFactory().get("/"))}
    for rows in (plain, annotated):
        assert [model_admin.lease_state(rows[pk]) for pk in (free.pk, live.pk, expired.pk)] == [
            "free",
            "live",
            "expired",
        ]


def test_timeline_comes_from_the_explainer_registered_for_the_kind():
    row = NotificationFactory()
    html = admin.site._registry[Notification].timeline(row)
    assert "weave-timeline" in html and f"Notification {row.pk}" in html

"""A secret that reached a table is still never shown: admin pages (view-only users too) and weave_explain."""

from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.urls import reverse

from notifications.models import DeliveryAttempt
from onboarding.models import RunAttempt
from tests.factories import NotificationFactory, OnboardingRunFactory

pytestmark = pytest.mark.django_db

TOKEN = "push-token-Zq8w1x"
PASSWORD = "url-pass-77ab"
LEAK = (
    f"HTTP 401: you sent Authorization: Bearer {TOKEN} to https://svc:{PASSWORD}@push.example/send; "
    f"token {TOKEN}; Authorization: Basic c3ZjOnNlY3JldA=="
)
SECRETS = (TOKEN, PASSWORD, "c3ZjOnNlY3JldA==")


@pytest.fixture
def configured(settings):
    settings.WEAVE = {"PUSH_URL": f"https://svc:{PASSWORD}@push.example/send", "PUSH_TOKEN": TOKEN}


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    codenames = ["view_notification", "view_deliveryattempt", "view_onboardingrun", "view_runattempt"]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} shown"


def test_notification__admin_pages_and_explain_never_show_a_stored_secret(configured, viewer):
    row = NotificationFactory(status="failed", last_error=LEAK)
    attempt = DeliveryAttempt.objects.create(
        notification=row, owner="w", fence=1, started_at=row.created_at, outcome="permanent", reason=LEAK
    )
    pages = [
        reverse("admin:weave_notifications_notification_change", args=[row.pk]),
        reverse("admin:weave_notifications_deliveryattempt_change", args=[attempt.pk]),
        reverse("admin:weave_notifications_deliveryattempt_changelist"),
    ]
    for url in pages:
        page = viewer.get(url)
        assert page.status_code == 200, url
        assert_hidden(page.content.decode())
    out = StringIO()
    call_command("weave_explain", "notification", str(row.pk), stdout=out)
    assert_hidden(out.getvalue())
    assert "[redacted]" in out.getvalue()


def test_run__admin_pages_and_explain_never_show_a_stored_secret(configured, viewer):
    run = OnboardingRunFactory(reason=LEAK)
    attempt = RunAttempt.objects.create(
        run=run, fence=1, owner="w", started_at=run.created_at, outcome="failed", reason=LEAK
    )
    pages = [
        reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk]),
        reverse("admin:weave_onboarding_runattempt_change", args=[attempt.pk]),
        reverse("admin:weave_onboarding_runattempt_changelist") + "?outcome=all",
    ]
    for url in pages:
        page = viewer.get(url)
        assert page.status_code == 200, url
        assert_hidden(page.content.decode())
    out = StringIO()
    call_command("weave_explain", "run", str(run.pk), stdout=out)
    assert_hidden(out.getvalue())

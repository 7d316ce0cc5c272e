"""The read-only inlines of Weave's change pages on a phone: the attempts table scrolls sideways in a region a
keyboard can reach (axe-core's scrollable-region-focusable), on the notification and onboarding run pages."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from onboarding.models import OnboardingRun, RunAttempt
from tests.e2e.browser import sync_browser
from tests.e2e.test_browser_console import axe_violations
from tests.factories import SupplierFactory

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def pages_with_attempts() -> dict[str, str]:
    """A notification and an onboarding run, each with one attempt written by a worker: their change pages."""
    from notifications.models import DeliveryAttempt, Notification
    from weave.telemetry import db_now

    now = db_now()
    note = Notification.objects.create(device_token="inline-device-0001", title="Hello", body="b")
    DeliveryAttempt.objects.create(
        notification=note,
        owner="push:inline-host:4242:abcdef",
        fence=1,
        started_at=now - timedelta(seconds=3),
        finished_at=now - timedelta(seconds=2),
        latency_ms=12,
        outcome="temporary",
        reason="Could not reach the provider; nothing was sent.",
    )
    run = OnboardingRun.objects.create(supplier=SupplierFactory(), plan=[], reason="")
    RunAttempt.objects.create(
        run=run, fence=1, owner="onboarding:inline-host:1", outcome="crashed", started_at=now, reason="worker died"
    )
    return {
        "Delivery attempts": f"/admin/weave_notifications/notification/{note.pk}/change/",
        "Run attempts": f"/admin/weave_onboarding/onboardingrun/{run.pk}/change/",
    }


def test_read_only_inlines_on_a_phone__the_keyboard_can_scroll_them_and_axe_finds_nothing(
    live_server, chromium, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as the console's walk: Playwright's loop runs here
    User.objects.create_superuser("inlines", "ops@example.com", "inlines-pw")
    pages = pages_with_attempts()
    with sync_browser() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", "inlines")
        page.fill("#id_password", "inlines-pw")
        page.click("input[type=submit]")
        for name, url in pages.items():
            page.goto(f"{live_server.url}{url}")
            assert not axe_violations(page), (url, axe_violations(page))
            region = page.get_by_role("region", name=name)
            assert region.count() == 1, (url, name)
            assert region.evaluate("r => r.scrollWidth > r.clientWidth"), (url, "the table fits: nothing to scroll")
            region.focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_function("r => r.scrollLeft > 0", arg=region.element_handle())
            assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 1
        browser.close()

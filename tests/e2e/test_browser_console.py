"""The operator's walk through the admin in a real browser (Playwright driving Debian's Chromium).

Log in, start onboarding from the Suppliers action, watch the runs complete (the list reloads), open a
run's timeline, open the Weave dashboard and check its charts have data. A real qcluster does the
work against the fake supplier services and the fake push provider. Screenshots: .run/screenshots/.

Needs a Chromium binary (`apt-get install chromium`; no browser download): skipped without one,
except under CI=true, where it fails instead.
"""

import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from notifications.testing.fake_provider import FakePushProvider
from onboarding.models import OnboardingRun, Supplier
from onboarding.testing.fake_services import FakeSupplierServices
from onboarding.testing.numbers import german_iban, german_vat_number

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[2] / ".run" / "screenshots"
SUPPLIERS = 3


def poll(page, predicate, *, timeout: float, message: str, reload: bool = True) -> None:
    """Reload `page` until `predicate(page)` holds, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate(page):
            return
        time.sleep(1.0)
        if reload:
            page.reload()
    page.screenshot(path=str(SHOTS / "timeout.png"), full_page=True)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {message} (screenshot: timeout.png)")


def test_operator_walkthrough(live_server, groups, worker_env, chromium, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop on this thread; the ORM calls below are plain sync code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    User.objects.create_superuser("operator", "ops@example.com", "walk-through-pw")
    for n in range(SUPPLIERS):
        Supplier.objects.create(
            legal_name=f"Browser Test Supplier {n}",
            country="DE",
            tax_id=german_vat_number(n),  # well-formed: validation refuses a bad checksum before any run
            contact_email=f"ap{n}@supplier.example",
            device_token=f"browser-device-{n}",
            iban=german_iban(n),
        )
    with FakeSupplierServices() as services, FakePushProvider() as push:
        env = {**worker_env, "WEAVE_SUPPLIER_API_URL": services.url, "WEAVE_PUSH_URL": push.push_url}
        cluster = groups.manage("qcluster", "qcluster", env=env)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(15_000)

            page.goto(f"{live_server.url}/admin/login/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "walk-through-pw")
            page.click("input[type=submit]")
            assert page.locator("a[href='/admin/weave/dashboard/']").count() >= 1, "the index links the dashboard"
            page.screenshot(path=str(SHOTS / "01-admin-index.png"), full_page=True)

            page.goto(f"{live_server.url}/admin/weave_onboarding/supplier/")
            page.check("#action-toggle")
            page.select_option("select[name=action]", "start_onboarding")
            page.click("button[name=index]")
            assert "Started onboarding for 3" in page.locator("ul.messagelist").inner_text()
            page.screenshot(path=str(SHOTS / "02-onboarding-started.png"), full_page=True)

            page.goto(f"{live_server.url}/admin/weave_onboarding/onboardingrun/")

            def all_completed(pg) -> bool:
                assert cluster.alive(), cluster.log_tail()
                return pg.locator("#result_list tbody tr").count() == SUPPLIERS and all(
                    "completed" in row.lower() for row in pg.locator("#result_list tbody tr").all_inner_texts()
                )

            try:
                poll(page, all_completed, timeout=120, message="every run to show completed in the run list")
            except AssertionError as exc:
                runs = list(OnboardingRun.objects.values_list("pk", "status", "phase", "reason"))
                raise AssertionError(f"{exc}; runs: {runs}; qcluster log: {cluster.log_tail()}") from exc
            page.screenshot(path=str(SHOTS / "03-runs-completed.png"), full_page=True)

            run = OnboardingRun.objects.order_by("pk").first()
            page.goto(f"{live_server.url}/admin/weave_onboarding/onboardingrun/{run.pk}/change/")
            timeline = page.locator("table.weave-timeline")
            assert timeline.count() == 1
            text = timeline.inner_text()
            assert "receipt" in text and "send_welcome_notification" in text
            assert page.locator("a", has_text="notification #").count() >= 1, "the run links its welcome notification"
            page.screenshot(path=str(SHOTS / "04-run-timeline.png"), full_page=True)

            page.goto(f"{live_server.url}/admin/weave/dashboard/?refresh=0")

            def charts_have_data(pg) -> bool:
                points = [
                    int(n)
                    for n in pg.locator("svg.weave-chart").evaluate_all(
                        "els => els.map(e => e.getAttribute('data-points'))"
                    )
                ]
                return len(points) >= 2 and all(n > 0 for n in points)

            poll(page, charts_have_data, timeout=90, message="the dashboard's charts to have data")
            assert page.locator("#weave-leases").count() == 1 and page.locator("#weave-ttl").count() == 1
            assert "completed" in page.locator("#weave-onboarding").inner_text().lower()
            page.screenshot(path=str(SHOTS / "05-dashboard.png"), full_page=True)
            browser.close()

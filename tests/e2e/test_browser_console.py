"""The operator's walk through the admin in a real browser (Playwright driving Debian's Chromium).

Log in, start onboarding from the Suppliers action, watch the runs complete (the list reloads), open a
run's timeline, open the Weave dashboard and check its charts have data. A real qcluster does the
work against the fake supplier services and the fake push provider. Screenshots: .run/screenshots/.

Needs a Chromium binary (`apt-get install chromium`; no browser download): skipped without one,
except under CI=true, where it fails instead.
"""

import os
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from notifications.testing.fake_provider import FakePushProvider
from onboarding.models import OnboardingRun
from onboarding.testing.fake_services import FakeSupplierServices
from tests.e2e.browser import sync_browser
from tests.factories import SupplierFactory

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
    # Playwright's sync API runs an event loop on this thread; the ORM calls below are plain sync code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    User.objects.create_superuser("operator", "ops@example.com", "walk-through-pw")
    SupplierFactory.create_batch(SUPPLIERS)
    with FakeSupplierServices() as services, FakePushProvider() as push:
        env = {**worker_env, "WEAVE_SUPPLIER_API_URL": services.url, "WEAVE_PUSH_URL": push.push_url}
        cluster = groups.manage("qcluster", "qcluster", env=env)
        with sync_browser() as p:
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
            # The qcluster's worker processes report what they run with; the dashboard shows their values.
            from weave.models import WorkerReport

            # any(): a worker of an earlier test may report once more after that test's tables were flushed.
            reports = list(WorkerReport.objects.all())
            assert any(r.config.get("PUSH_TIMEOUT") == 3.0 for r in reports), [(r, r.config) for r in reports]
            workers = page.locator("#weave-workers").inner_text()
            assert "live" in workers and "PUSH_TIMEOUT" in workers
            page.screenshot(path=str(SHOTS / "05-dashboard.png"), full_page=True)
            browser.close()


# --- the screens at 1440, 1280 and 390 px, with axe-core ---------------------------------------------------

AXE = Path(__file__).resolve().parent / "node_modules" / "axe-core" / "axe.min.js"
LONG_REASON = (
    "Provider answered HTTP 410 Gone: the device token is no longer registered with the push service, so "
    "Weave stopped trying and marked the notification failed; register the device again to reach it"
)


def axe_violations(page) -> list[str]:
    """Serious and critical axe-core violations on the page as it is, one line each."""
    if not AXE.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true requires axe-core: (cd tests/e2e && npm ci), as .ci/run does")
        return []  # without node_modules the layout checks still run; the CI run always has axe
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations.filter(v => ['serious', 'critical'].includes(v.impact))
                .map(v => v.impact + ' ' + v.id + ': ' + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | '));
        }"""
    )
    return list(found)


def overflow(page) -> dict:
    """How far the page and each reason cell reach past the viewport's right edge (0 = none)."""
    return page.evaluate(
        """() => {
            const width = document.documentElement.clientWidth;
            const cells = [...document.querySelectorAll(
                '#result_list td.field-reason, #result_list td.field-shown_reason, #result_list td.field-list_reason')];
            const status = [...document.querySelectorAll(
                '#result_list td.field-status_word, #result_list td.field-outcome_word')];
            const results = document.querySelector('#changelist .results');
            return {
                page: document.documentElement.scrollWidth - width,
                results: results ? results.scrollWidth - results.clientWidth : 0,
                reasons: cells.map(c => Math.round(c.getBoundingClientRect().right - width)),
                reasonsShown: cells.filter(c => c.getBoundingClientRect().width > 60).length,
                cells: cells.length,
                tallStatus: status.filter(c => c.getBoundingClientRect().height > 60).length,
            };
        }"""
    )


def make_ops_trouble() -> None:
    """What the operations panels must explain: an outage two workers saw, a polling watcher, a retention backlog."""
    from datetime import timedelta

    from tests.weave.test_retention import finished_notification
    from weave.models import WatcherProbe, WorkerReport
    from weave.telemetry import db_now

    now = db_now()
    for name in ("web-1:101", "web-2:202"):
        last = {
            "began_at": (now - timedelta(seconds=70)).isoformat(),
            "ended_at": (now - timedelta(seconds=64)).isoformat(),
            "seconds": 6.0,
            "error": "OperationalError: terminating connection due to administrator command",
        }
        WorkerReport.objects.create(
            name=name, started_at=now, seen_at=now, config={}, link={"outages": 1, "last": last}
        )
    WatcherProbe.objects.create(
        process="web-2:202", mode="poll", reason="a probe NOTIFY did not arrive (a transaction pooler?)", probed_at=now
    )
    finished_notification(40, attempts=2)


def make_trouble():
    """Rows in every state the screens must explain: failed with a long reason, an expired lease, a failed run."""
    from datetime import timedelta

    from notifications.models import DeliveryAttempt, Notification
    from onboarding.models import RunAttempt
    from weave.telemetry import db_now

    now = db_now()
    failed = []
    for n in range(4):
        row = Notification.objects.create(
            device_token=f"screen-device-{n:04d}-abcdefghijkl", title=f"Order {n} shipped", body="b", data={"n": n}
        )
        Notification.objects.filter(pk=row.pk).update(status="failed", last_error=LONG_REASON, fence=1)
        DeliveryAttempt.objects.create(
            notification=row,
            owner="push:screens-host:4242:abcdef",
            fence=1,
            started_at=now - timedelta(seconds=30),
            finished_at=now - timedelta(seconds=29),
            latency_ms=120,
            http_status=410,
            outcome="permanent",
            reason=LONG_REASON,
        )
        failed.append(row)
    held = Notification.objects.create(device_token="screen-held-device", title="Held", body="b")
    Notification.objects.claim(held.pk, owner="push:frozen-host:99:deadbeef", ttl=-90)
    run = OnboardingRun.objects.create(supplier=SupplierFactory(), plan=[], reason="")
    OnboardingRun.objects.claim(run.pk, owner="onboarding:screens:1", ttl=30)
    OnboardingRun.objects.filter(pk=run.pk).update(
        status="failed",
        owner=None,
        lease_expires_at=None,
        phase="set_payment_terms",
        failed_step="register_bank_account",
        reason="register_bank_account: Bank account refused: the account is closed.",
    )
    RunAttempt.objects.create(
        run=run,
        fence=1,
        owner="onboarding:screens:1",
        started_at=now - timedelta(seconds=20),
        ended_at=now - timedelta(seconds=19),
        outcome="failed",
        reason="register_bank_account: Bank account refused: the account is closed.",
    )
    return failed, held, run


LIST_PAGES = [
    "/admin/weave_notifications/notification/",
    "/admin/weave_notifications/deliveryattempt/",
    "/admin/weave_onboarding/onboardingrun/",
    "/admin/weave_onboarding/runattempt/",
]


# The lists every core-run job type gets (a site's own, django.tasks tasks, FCM topic jobs).
JOB_LIST_PAGES = [
    "/admin/shipping/shipment/",
    "/admin/weave/taskrow/",
    "/admin/weave_notifications/topicsubscription/",
]


def story_first(page) -> dict:
    """Where a change page's story (summary and timeline) and its first raw field start, in px from the top."""
    return page.evaluate(
        """() => {
            const top = el => el ? Math.round(el.getBoundingClientRect().top + window.scrollY) : null;
            return {
                story: top(document.querySelector('#weave-story')),
                summary: top(document.querySelector('#weave-story-summary')),
                timeline: top(document.querySelector('#weave-story table.weave-timeline')),
                fields: top(document.querySelector('fieldset.module')),
                timelines: document.querySelectorAll('table.weave-timeline').length,
                viewport: window.innerHeight,
            };
        }"""
    )


def assert_story_first(page, url: str) -> None:
    seen = story_first(page)
    assert seen["timelines"] == 1 and seen["story"] is not None and seen["fields"] is not None, (url, seen)
    assert seen["story"] < seen["summary"] < seen["timeline"] < seen["fields"], (url, seen)
    assert seen["summary"] < seen["viewport"], ("the summary is on the first screen", url, seen)


def make_jobs():
    """A site's own job that lost its lease to a rival (who holds it now), a django.tasks task, a topic job."""
    from django.db.models import F

    from notifications.models import TopicSubscription
    from tests.jobs.shipping.background import add
    from tests.jobs.shipping.models import Shipment
    from weave.models import JobAttempt, TaskRow
    from weave.telemetry import db_now

    counted = {"attempts": F("attempts") + 1}  # each claim counts its attempt, as the runner's does
    now = db_now()
    shipment = Shipment.objects.create(parcel="a parcel with a rather long description, " * 2)  # 84 of 100
    Shipment.objects.claim(shipment.pk, owner="shipping:host-a:101:aaaa", ttl=-30, also=counted)
    Shipment.objects.claim(shipment.pk, owner="shipping:host-b:202:bbbb", ttl=600, also=counted)
    JobAttempt.objects.create(
        job_type="shipment",
        job_id=str(shipment.pk),
        number=1,
        owner="shipping:host-a:101:aaaa",
        fence=1,
        outcome="blocked",
        reason=f"Lease lost at step book: now held by shipping:host-b:202:bbbb at fence 2. {LONG_REASON}",
        started_at=now,
        finished_at=now,
    )
    Shipment.objects.filter(pk=shipment.pk).update(last_error=LONG_REASON)
    add.enqueue(2, 3)
    task = TaskRow.objects.get()
    topic = TopicSubscription.objects.create(backend="fcm", topic="news-" * 30, action="subscribe", tokens=["t"])
    return shipment, task, topic


# Lists without a reason column: checked with axe-core only.
MORE_PAGES = [
    "/admin/weave/",  # the apps' index pages: breadcrumb links told from text by more than colour
    "/admin/weave_notifications/",
    "/admin/weave_onboarding/",
    "/admin/weave_onboarding/supplier/",
    "/admin/weave_notifications/device/",
    "/admin/weave_notifications/breakeropening/",
    "/admin/weave_onboarding/stepreceipt/",
    "/admin/weave_onboarding/vendorrecord/",
]


def row_actions_seen(page) -> dict:
    """A row page's actions as a person meets them: enabled buttons, and disabled ones with their reason."""
    return page.evaluate(
        """() => {
            const width = document.documentElement.clientWidth;
            return [...document.querySelectorAll('#weave-row-actions li')].map(li => {
                const button = li.querySelector('button');
                const why = button.getAttribute('aria-describedby');
                const reason = why ? document.getElementById(why) : null;
                return {
                    action: li.dataset.action,
                    label: button.innerText,
                    disabled: button.disabled,
                    reason: reason ? reason.innerText : '',
                    reasonVisible: reason ? reason.getBoundingClientRect().width > 0 : false,
                    right: Math.round(Math.max(button.getBoundingClientRect().right,
                        reason ? reason.getBoundingClientRect().right : 0) - width),
                };
            });
        }"""
    )


def actions_on(page, url: str, shot: str) -> dict:
    """`row_actions_seen` on `url`, read as soon as the page is parsed: an active run's page reloads itself
    every 2 s, which can abort a slow full load or destroy the page under a late read (then read again)."""
    from playwright.sync_api import Error

    for _ in range(3):
        try:
            page.goto(url, wait_until="domcontentloaded")
            seen = {a["action"]: a for a in row_actions_seen(page)}
            page.screenshot(path=str(SHOTS / shot), full_page=True)
            return seen
        except Error:
            continue
    raise AssertionError(f"{url} reloaded under every read")


def test_operator_screens_at_1440_1280_and_390_px(live_server, chromium, monkeypatch, settings):
    from notifications.models import Notification

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    # A long push lease, so the stuck one below stays stuck (live, its renewal overdue) for the whole walk.
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_LEASE_TTL": 600.0}
    SHOTS.mkdir(parents=True, exist_ok=True)
    User.objects.create_superuser("screens", "ops@example.com", "screens-pw")
    failed, held, run = make_trouble()
    shipment, task, topic = make_jobs()
    make_ops_trouble()
    stuck = Notification.objects.create(device_token="screen-stuck-device", title="Stuck", body="b")
    Notification.objects.claim(stuck.pk, owner="push:stuck-host:77:cafe", ttl=120)  # 120 of 600 s left
    with sync_browser() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", "screens")
        page.fill("#id_password", "screens-pw")
        page.click("input[type=submit]")

        # The index leads with the dashboard: its link is on the first screen, above the app list.
        link = page.locator("#weave-dashboard-link a[href='/admin/weave/dashboard/']")
        assert link.count() == 1 and link.bounding_box()["y"] < 300, link.bounding_box()
        assert not axe_violations(page), axe_violations(page)

        # Job pages lead with the story (summary, then timeline) on the first screen; the raw fields follow.
        story_pages = [
            f"/admin/weave_notifications/notification/{failed[0].pk}/change/",
            f"/admin/weave_onboarding/onboardingrun/{run.pk}/change/",
            f"/admin/shipping/shipment/{shipment.pk}/change/",
            f"/admin/weave/taskrow/{task.pk}/change/",
            f"/admin/weave_notifications/topicsubscription/{topic.pk}/change/",
        ]
        for url in story_pages:
            page.goto(f"{live_server.url}{url}")
            assert_story_first(page, url)
            assert not axe_violations(page), (url, axe_violations(page))
        page.goto(f"{live_server.url}{story_pages[2]}")
        assert "2 attempts: 1 ended, 1 running" in page.locator("#weave-story-summary").inner_text()
        page.screenshot(path=str(SHOTS / "19-job-story-1440.png"), full_page=True)

        # Deleting a job a worker holds is refused on its own page, naming the holder and the lease's end.
        with page.expect_navigation():
            page.locator("a.deletelink").click()
        assert page.url.endswith(story_pages[2]), page.url
        refusal = page.locator("ul.messagelist li.error").inner_text()
        assert "held by shipping:host-b:202:bbbb under a live lease until" in refusal, refusal
        assert shipment.__class__.objects.filter(pk=shipment.pk).exists()
        assert not axe_violations(page), axe_violations(page)

        # The dashboard: a verdict first, naming the expired lease; tiles link to the rows they count.
        page.goto(f"{live_server.url}/admin/weave/dashboard/")
        verdict = page.locator("#weave-verdict")
        assert "Failing" in verdict.inner_text() or "Degraded" in verdict.inner_text()
        assert f"notification #{held.pk}" in verdict.inner_text() and "push:frozen-host:99" in verdict.inner_text()
        said = verdict.inner_text()
        assert "Database outage: 2 worker processes lost the database" in said and "(6 s, ended" in said
        assert "Wake-ups by polling: 1 of 1" in said and "Retention purge behind" in said
        for panel in ("outages", "retention", "wake"):
            assert page.locator(f"#weave-{panel} table").count() == 1, f"the {panel} panel has its table"
        assert page.locator("a.weave-stat").count() >= 5
        assert page.locator("meta[http-equiv=refresh]").count() == 0, "no auto-reload unless asked for"
        assert page.locator("details.weave-chart-data").count() >= 2, "each chart has a data table"
        assert not axe_violations(page), axe_violations(page)
        page.screenshot(path=str(SHOTS / "10-dashboard-1440.png"), full_page=True)

        # The stuck lease is named with its holder and fence, and its link opens the notification, whose
        # actions are shown disabled with the reason: a worker holds it.
        finding = verdict.locator("li", has_text="Stuck lease")
        assert "push:stuck-host:77:cafe" in finding.inner_text() and "at fence 1" in finding.inner_text()
        with page.expect_navigation():
            finding.locator(f"a:has-text('notification #{stuck.pk}')").click()
        assert page.url.endswith(f"/notification/{stuck.pk}/change/")
        seen = row_actions_seen(page)
        assert {a["action"] for a in seen} == {"retry_now", "cancel"}, seen
        for action in seen:
            assert action["disabled"] and action["reasonVisible"], action
            assert action["reason"].startswith("Not available: a worker holds it right now (push:stuck-host:77:cafe")
        assert not axe_violations(page), axe_violations(page)
        page.screenshot(path=str(SHOTS / "15-stuck-notification-actions-1440.png"), full_page=True)

        # A delivered notification offers nothing to retry or cancel; a failed one offers "Retry now" only.
        delivered = Notification.objects.create(device_token="screen-delivered-device", title="Done", body="b")
        Notification.objects.filter(pk=delivered.pk).update(status="delivered", delivered_at=held.created_at)
        page.goto(f"{live_server.url}/admin/weave_notifications/notification/{delivered.pk}/change/")
        seen = {a["action"]: a for a in row_actions_seen(page)}
        assert seen["retry_now"]["disabled"] and seen["retry_now"]["reason"].endswith(": nothing to retry")
        assert seen["cancel"]["disabled"] and seen["cancel"]["reason"].endswith(": too late to cancel")
        page.goto(f"{live_server.url}/admin/weave_notifications/notification/{failed[0].pk}/change/")
        seen = {a["action"]: a for a in row_actions_seen(page)}
        assert not seen["retry_now"]["disabled"] and seen["cancel"]["disabled"], seen
        assert seen["cancel"]["reason"] == "Not available: failed: nothing is queued to cancel"
        page.screenshot(path=str(SHOTS / "16-failed-notification-actions-1440.png"), full_page=True)
        with page.expect_navigation():
            page.locator("#weave-row-actions li[data-action=retry_now] button").click()
        assert "1 notification due now" in page.locator("ul.messagelist").inner_text()
        assert Notification.objects.get(pk=failed[0].pk).status == "pending"
        failed = failed[1:]  # the rest stay failed for the tile below

        page.goto(f"{live_server.url}/admin/weave/dashboard/")
        with page.expect_navigation():
            page.locator("a.weave-stat", has_text="failed").first.click()
        assert "status__exact=failed" in page.url
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == len(failed), "the failed tile opens the failed notifications"

        # Lists: reason and status side by side at 1280 px, nothing past the right edge, and no list that
        # scrolls sideways inside the page either.
        page.set_viewport_size({"width": 1280, "height": 900})
        for url in [*LIST_PAGES, *JOB_LIST_PAGES]:
            page.goto(f"{live_server.url}{url}")
            seen = overflow(page)
            page.screenshot(path=str(SHOTS / f"list-1280-{url.strip('/').replace('/', '-')}.png"), full_page=True)
            assert seen["page"] <= 1 and seen["results"] <= 1, (url, seen)
            assert all(r <= 1 for r in seen["reasons"]), (url, seen)
            if url in JOB_LIST_PAGES:
                assert not axe_violations(page), (url, axe_violations(page))
                continue
            assert seen["cells"] and seen["reasonsShown"] == seen["cells"], (url, seen)
            assert not axe_violations(page), (url, axe_violations(page))
        for url in [*MORE_PAGES, f"/admin/weave_onboarding/supplier/{run.supplier_id}/change/"]:
            page.goto(f"{live_server.url}{url}")
            assert not axe_violations(page), (url, axe_violations(page))
        page.goto(f"{live_server.url}{LIST_PAGES[0]}")
        clip = page.locator("#result_list td.field-reason .weave-clip").first
        assert clip.get_attribute("title") == LONG_REASON, "the whole reason is in the title"
        page.screenshot(path=str(SHOTS / "11-notifications-1280.png"), full_page=True)

        # A retry in the browser, with its note: the run's timeline shows the re-open and who did it.
        page.goto(f"{live_server.url}/admin/weave_onboarding/onboardingrun/")
        page.check(f"input[name=_selected_action][value='{run.pk}']")
        page.select_option("select[name=action]", "retry_failed")
        with page.expect_navigation():
            page.click("button[name=index]")
        page.fill("#id_why", "IBAN corrected")
        with page.expect_navigation():
            page.click("input[type=submit][value=Retry]")
        assert "Re-opened 1 failed run" in page.locator("ul.messagelist").inner_text()
        page.goto(f"{live_server.url}/admin/weave_onboarding/onboardingrun/{run.pk}/change/")
        timeline = page.locator("table.weave-timeline").inner_text()
        assert (
            "reopened" in timeline
            and "by screens: Re-opened under fence 2" in timeline
            and "IBAN corrected" in timeline
        )
        page.screenshot(path=str(SHOTS / "12-run-timeline-1440.png"), full_page=True)

        # A phone: no sideways scrolling, reasons readable, no letter-by-letter columns.
        page.set_viewport_size({"width": 390, "height": 844})
        for url in LIST_PAGES:
            page.goto(f"{live_server.url}{url}")
            seen = overflow(page)
            page.screenshot(path=str(SHOTS / f"list-390-{url.strip('/').replace('/', '-')}.png"), full_page=True)
            assert seen["page"] <= 1 and all(r <= 1 for r in seen["reasons"]), (url, seen)
            assert seen["reasonsShown"] == seen["cells"] and seen["tallStatus"] == 0, (url, seen)
        page.screenshot(path=str(SHOTS / "13-notifications-390.png"), full_page=True)

        # The re-opened run is active, so its list reloads itself: the reader keeps their place.
        page.goto(f"{live_server.url}/admin/weave_onboarding/onboardingrun/")
        assert page.locator("#weave-refresh[data-weave-refresh='2']").count() == 1
        page.evaluate("() => { window.scrollTo(0, 200); window.__before_reload = true; }")
        page.wait_for_function("() => window.__before_reload === undefined", timeout=10_000)  # it reloaded
        page.wait_for_function("() => window.scrollY > 150", timeout=5_000)
        page.goto(f"{live_server.url}/admin/weave/dashboard/")
        assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 1
        assert f"notification #{stuck.pk}" in page.locator("#weave-verdict li", has_text="Stuck lease").inner_text()
        page.screenshot(path=str(SHOTS / "14-dashboard-390.png"), full_page=True)

        for url in story_pages[:3]:
            page.goto(f"{live_server.url}{url}", wait_until="domcontentloaded")
            seen = story_first(page)
            assert seen["story"] < seen["timeline"] < seen["fields"], (url, seen)
            assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 1
            # The timeline itself fits the screen: a long worker name or key breaks rather than being cut off.
            past = page.evaluate(
                """() => Math.round(document.querySelector('table.weave-timeline').getBoundingClientRect().right
                    - document.documentElement.clientWidth)"""
            )
            assert past <= 1, (url, "the timeline reaches past the screen's edge by", past)
        page.screenshot(path=str(SHOTS / "20-job-story-390.png"), full_page=True)

        # On a phone a row's disabled actions still show their reasons, inside the screen.
        page.goto(f"{live_server.url}/admin/weave_notifications/notification/{delivered.pk}/change/")
        seen = row_actions_seen(page)
        assert seen and all(a["disabled"] and a["reasonVisible"] and a["right"] <= 1 for a in seen), seen
        assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 1
        page.screenshot(path=str(SHOTS / "17-delivered-notification-actions-390.png"), full_page=True)
        run_page = f"{live_server.url}/admin/weave_onboarding/onboardingrun/{run.pk}/change/"
        seen = actions_on(page, run_page, "18-run-actions-390.png")
        assert seen["retry_failed"]["disabled"] and "it has not failed" in seen["retry_failed"]["reason"], seen
        assert not seen["cancel"]["disabled"], "the re-opened run is pending: it can be cancelled"
        browser.close()

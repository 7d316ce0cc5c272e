"""A job's story on a phone: the timeline's time and event columns keep their words whole (Playwright, Chromium)."""

import pytest
from django.contrib.auth.models import User

from tests.e2e.browser import sync_browser
from tests.e2e.test_browser_console import axe_violations

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Each timeline cell of the first two columns whose longest word is wider than the cell: that word is split.
SPLIT_WORDS = """() => [...document.querySelectorAll('table.weave-timeline tbody tr')]
    .flatMap(tr => [...tr.cells].slice(0, 2))
    .filter(td => {
        const longest = td.textContent.trim().split(/\\s+/).reduce((a, b) => (b.length > a.length ? b : a), '');
        const probe = document.createElement('span');
        probe.style.whiteSpace = 'nowrap';
        probe.textContent = longest;
        td.appendChild(probe);
        const needs = probe.getBoundingClientRect().width;
        probe.remove();
        const style = getComputedStyle(td);
        return needs > td.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) + 0.5;
    })
    .map(td => td.textContent.trim())"""


def failed_shipment():
    """A shipment whose runner retried, then failed it: claims, receipts and endings with long worker names."""
    from tests.jobs.shipping.carrier import during_booking
    from tests.jobs.shipping.models import Shipment
    from weave.jobs.runner import run_job

    shipment = Shipment.objects.create(parcel="books")

    def carrier_down(ctx, hb):
        raise ConnectionError("carrier unreachable")

    during_booking.append(carrier_down)
    try:
        for owner in ("shipment:host-a.example.com:4242:9ed2507f", "shipment:host-b.example.com:4343:bc817a02"):
            Shipment.objects.filter(pk=shipment.pk).update(next_attempt_at=None)
            run_job("shipment", shipment.pk, owner=owner)
    finally:
        during_booking.remove(carrier_down)
    return shipment


def test_a_jobs_story_keeps_the_time_and_event_words_whole_at_390_and_1280_px(live_server, chromium, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    User.objects.create_superuser("story", "ops@example.com", "story-pw")
    shipment = failed_shipment()
    with sync_browser() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 390, "height": 844})
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", "story")
        page.fill("#id_password", "story-pw")
        page.click("input[type=submit]")
        for width in (390, 1280):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(f"{live_server.url}/admin/shipping/shipment/{shipment.pk}/change/")
            assert page.locator("table.weave-timeline tbody tr").count() >= 5
            assert page.evaluate(SPLIT_WORDS) == [], (width, "words split in the timeline's time or event column")
            assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 1
            assert not axe_violations(page), (width, axe_violations(page))
        browser.close()

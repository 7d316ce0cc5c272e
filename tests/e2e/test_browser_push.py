"""A browser registers its Web Push subscription through the demo page and the device API (Playwright, Chromium).

The browser's push service is replaced by a subscription object (headless Chromium reaches no push
service here): the page, its CSRF handling, the endpoint and the services are the real ones.
"""

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.contrib.auth.models import User

from notifications.models import Device
from notifications.testing.keys import TestKeys
from tests.e2e.browser import sync_browser
from tests.e2e.test_browser_console import SHOTS

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def subscription() -> dict:
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return {
        "endpoint": "https://fcm.googleapis.com/fcm/send/browser-test-" + b64url(b"x" * 24),
        "expirationTime": None,
        "keys": {"p256dh": b64url(point), "auth": b64url(b"0123456789abcdef")},
    }


# Stands in for the browser's push service: register() and subscribe() resolve at once with `SUB`.
STUB = """
const SUB = %s;
Object.defineProperty(navigator, "serviceWorker", {value: {
  register: async () => ({pushManager: {subscribe: async (options) => {
    window.__subscribeOptions = options;
    return {toJSON: () => SUB};
  }}}),
}});
"""


def test_browser_subscribes_and_the_device_is_registered_for_the_user(
    live_server,
    settings,
    chromium,
    monkeypatch,
    tmp_path: Path,
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    keys = TestKeys.create(tmp_path)
    settings.WEAVE = {
        **(settings.WEAVE or {}),
        "PUSH_BACKENDS": {
            "webpush": {
                "BACKEND": "notifications.backends.webpush.WebPushBackend",
                "OPTIONS": {"vapid_private_key_file": str(keys.vapid_private_key_file), "vapid_subject": "mailto:o@x"},
            }
        },
    }
    user = User.objects.create_user("reader", password="browser-pw", is_staff=True)
    sub = subscription()
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_browser() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.add_init_script(STUB % json.dumps(sub))
        page.goto(f"{live_server.url}/push-demo/")
        page.fill("#id_username", "reader")  # sent to the admin's login first
        page.fill("#id_password", "browser-pw")
        page.click("input[type=submit]")
        page.wait_for_url("**/push-demo/")
        page.click("#subscribe")
        page.wait_for_function("document.getElementById('status').textContent.length > 0")
        status = page.text_content("#status")
        server_key = page.evaluate("Array.from(window.__subscribeOptions.applicationServerKey)")
        page.screenshot(path=str(SHOTS / "push-register.png"), full_page=True)
        browser.close()

    device = Device.objects.get()
    assert status == f"Registered as device {device.pk}."
    assert (device.user, device.backend, device.platform, device.active) == (user, "webpush", "web", True)
    assert json.loads(device.token)["endpoint"] == sub["endpoint"]
    assert "\n" not in device.token  # stored compact, whatever the browser's JSON looked like
    assert len(server_key) == 65 and server_key[0] == 4  # the VAPID public key, as an uncompressed point

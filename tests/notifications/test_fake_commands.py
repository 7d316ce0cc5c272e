"""The fakes' commands a host site's tests start: ports as asked, and the settings they print reach them."""

import json
import ssl
import sys

import httpx
import pytest
from django.core.checks import run_checks

from tools.processes import PROJECT_ROOT, ProcessGroups, wait_until

pytestmark = pytest.mark.e2e


def manage(groups, name, *args):
    return groups.start(name, [sys.executable, str(PROJECT_ROOT / "manage.py"), *args])


def test_weave_fake_push_serves_all_four_and_writes_the_settings_that_reach_them(tmp_path, settings):
    directory = tmp_path / "fakes"
    ports = ["--port", "0", "--fcm-port", "0", "--apns-port", "0", "--webpush-port", "0"]
    with ProcessGroups(tmp_path / "logs") as groups:
        child = manage(groups, "push", "weave_fake_push", "--dir", str(directory), *ports)
        settings_file = directory / "weave_settings.json"
        wait_until(lambda: settings_file.exists() or not child.alive(), timeout=60, message="the push fakes")
        assert child.alive(), child.log_tail()
        site = json.loads(settings_file.read_text())
        printed = child.log_tail(40)

        assert set(site) == {"PUSH_URL", "PUSH_TOKEN", "PUSH_BACKENDS", "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK"}
        assert site["PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK"] is True
        assert f"'PUSH_URL': {site['PUSH_URL']!r}" in printed
        assert "'PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK': True" in printed
        # The webhook fake answers where the settings say ...
        stats = httpx.get(site["PUSH_URL"].removesuffix("/push") + "/_stats", timeout=10)
        assert stats.json()["requests"] == 0
        # ... and so does each HTTP/2 fake, on the port it printed, trusted through the CA it generated.
        for alias in ("fcm", "webpush"):
            options = site["PUSH_BACKENDS"][alias]["OPTIONS"]
            url = options.get("base_url") or next(
                line.split()[1] for line in printed.splitlines() if line.strip().startswith(alias)
            )
            trusted = ssl.create_default_context(cafile=options["ca_file"])
            assert httpx.get(f"{url}/_stats", verify=trusted, timeout=10).status_code == 200
        # A site given these settings passes the push checks.
        settings.WEAVE = {**settings.WEAVE, **site}
        assert [m.id for m in run_checks() if m.id.startswith("notifications.") and m.is_serious()] == []


def test_weave_fake_push_webhook_only_on_a_given_port(tmp_path):
    from tests.e2e.conftest import free_port

    port = free_port()
    with ProcessGroups(tmp_path / "logs") as groups:
        child = manage(groups, "push", "weave_fake_push", "--serve", "webhook", "--port", str(port),
                       "--dir", str(tmp_path / "fakes"), "--token", "sekrit")  # fmt: skip
        settings_file = tmp_path / "fakes" / "weave_settings.json"
        wait_until(lambda: settings_file.exists() or not child.alive(), timeout=60, message="the webhook fake")
        site = json.loads(settings_file.read_text())
        assert site == {"PUSH_URL": f"http://127.0.0.1:{port}/push", "PUSH_TOKEN": "sekrit"}
        refused = httpx.post(site["PUSH_URL"], json={"to": "d", "title": "t", "body": "b"}, timeout=10)
        assert refused.status_code == 401


def test_weave_fake_suppliers_prints_the_url_to_set(tmp_path):
    from tests.e2e.conftest import free_port

    port = free_port()
    with ProcessGroups(tmp_path / "logs") as groups:
        child = manage(groups, "suppliers", "weave_fake_suppliers", "--port", str(port))
        wait_until(lambda: "SUPPLIER_API_URL" in child.log_tail() or not child.alive(), timeout=60, message="it")
        assert f"'SUPPLIER_API_URL': 'http://127.0.0.1:{port}'," in child.log_tail()
        assert httpx.get(f"http://127.0.0.1:{port}/_stats", timeout=10).status_code == 200

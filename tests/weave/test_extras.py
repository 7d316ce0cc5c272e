"""The optional extras: the apps import without them, and the system checks name the one a site is missing.

A missing library is simulated the way Python itself records one: `sys.modules[name] = None` makes
every `import name` (and `find_spec`) fail, exactly as if the distribution were not installed.
"""

import subprocess
import sys
import textwrap

import pytest
from django.core.checks import run_checks

from tools.processes import PROJECT_ROOT
from weave.extras import EXTRAS, extra_for_module, missing_modules

FCM = {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {"project_id": "p", "credentials_file": "x"}}


def block(monkeypatch, *modules: str) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def ids(**kwargs) -> list[str]:
    return [message.id for message in run_checks(**kwargs)]


def test_every_extra_is_installed_in_the_development_environment():
    assert {extra: missing_modules(extra) for extra in EXTRAS} == {extra: [] for extra in EXTRAS}


def test_extra_for_module__finds_the_extra_of_a_module_or_its_parent():
    assert extra_for_module("jwt") in ("fcm", "apns")  # both sign JWTs
    assert extra_for_module("http_ece") == "webpush"
    assert extra_for_module("stdnum.iban") == "onboarding"
    assert extra_for_module("django") is None
    assert extra_for_module(None) is None


def test_fcm_backend_without_pyjwt__names_the_fcm_extra(settings, monkeypatch):
    settings.WEAVE = {"PUSH_BACKENDS": {"default": FCM}}
    assert "notifications.E004" not in ids()
    block(monkeypatch, "jwt")
    errors = [m for m in run_checks() if m.id == "notifications.E004"]
    assert len(errors) == 1
    assert "'default'" in errors[0].msg and "[fcm]" in errors[0].msg and "jwt" in errors[0].msg
    assert errors[0].hint == 'Install the extra: pip install "weave-jobs[fcm]".'


def test_a_subclass_of_a_backend_needs_its_extra_too(settings, monkeypatch):
    settings.WEAVE = {"PUSH_BACKENDS": {"apple": {"BACKEND": "tests.weave.test_extras.SiteAPNs"}}}
    block(monkeypatch, "jwt")
    (error,) = [m for m in run_checks() if m.id == "notifications.E004"]
    assert "[apns]" in error.msg and "'apple'" in error.msg


def test_webpush_backend_whose_module_cannot_import__still_names_the_extra(settings, monkeypatch):
    settings.WEAVE = {"PUSH_BACKENDS": {"browser": {"BACKEND": "notifications.backends.webpush.WebPushBackend"}}}
    monkeypatch.delitem(sys.modules, "notifications.backends.webpush", raising=False)
    block(monkeypatch, "http_ece")
    (error,) = [m for m in run_checks() if m.id == "notifications.E004"]
    assert "[webpush]" in error.msg and "http_ece" in error.msg


def test_webhook_only_site_needs_no_push_extra(settings, monkeypatch):
    settings.WEAVE = {"PUSH_URL": "https://push.example.com/send"}
    block(monkeypatch, "jwt", "cryptography", "http_ece", "py_vapid", "hypercorn")
    assert "notifications.E004" not in ids()


def test_onboarding_without_its_libraries__names_the_onboarding_extra(monkeypatch):
    assert "onboarding.E004" not in ids()
    block(monkeypatch, "schwifty")
    (error,) = [m for m in run_checks() if m.id == "onboarding.E004"]
    assert "[onboarding]" in error.msg and "schwifty" in error.msg


def test_mounted_metrics_without_prometheus_client__names_the_metrics_extra(settings, monkeypatch):
    assert "weave.E007" not in ids()
    block(monkeypatch, "prometheus_client")
    (error,) = [m for m in run_checks() if m.id == "weave.E007"]
    assert "[metrics]" in error.msg and "prometheus_client" in error.msg
    settings.ROOT_URLCONF = "tests.weave.test_extras"  # a URLconf without weave.urls
    assert "weave.E007" not in ids()


urlpatterns: list = []


def _site_apns():
    from notifications.backends.apns import APNsBackend

    class SiteAPNs(APNsBackend):
        pass

    return SiteAPNs


def __getattr__(name: str):
    # Defined on first use, so importing this test module never imports a backend.
    if name == "SiteAPNs":
        return _site_apns()
    raise AttributeError(name)


@pytest.mark.e2e
def test_the_apps_import_and_check_without_any_extra():
    """A fresh interpreter in which no optional library can be imported sets Django up, imports every
    app's public modules and the backends, and gets the extras' errors from `check`, not an ImportError."""
    blocked = sorted({module.split(".")[0] for modules in EXTRAS.values() for module in modules})
    script = textwrap.dedent(
        f"""
        import importlib.abc, sys
        BLOCKED = {blocked!r}

        class Missing(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Missing())
        import django
        django.setup()
        from django.conf import settings
        from django.core.checks import run_checks
        import notifications.services, notifications.admin, notifications.backends.fcm, notifications.backends.apns
        import onboarding.services, onboarding.admin, weave.urls, weave.metrics
        settings.WEAVE = {{"PUSH_BACKENDS": {{"default": {FCM!r}}}}}
        print(sorted({{m.id for m in run_checks() if m.id.endswith(("E004", "E007"))}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "DEBUG": "true", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['notifications.E004', 'onboarding.E004', 'weave.E007']"

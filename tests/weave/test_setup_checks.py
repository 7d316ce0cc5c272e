"""`manage.py check` names each piece a new site may leave out or contradict, with a hint that fixes it.

Each case runs every registered check (as `manage.py check` does) and then applies the hint to the
settings: the message goes away, which is what "a hint that fixes it" means.
"""

from django.core.checks import run_checks

SAFE_Q = {
    "name": "t",
    "orm": "default",
    "timeout": 120,
    "retry": 300,
    "max_attempts": 3,
    "save_limit": -1,
    "broker_class": "weave.broker.DatabaseClockORM",
}


def found(check_id):
    return [m for m in run_checks() if m.id == check_id]


def test_django_q_missing_from_installed_apps_is_named(settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "django_q"]
    (error,) = found("weave.E008")
    assert error.is_serious()
    assert "django_q is not in INSTALLED_APPS" in error.msg
    assert 'Add "django_q" to INSTALLED_APPS' in error.hint

    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "django_q"]
    assert found("weave.E008") == []


def test_q_cluster_without_a_broker_is_named(settings):
    settings.Q_CLUSTER = {k: v for k, v in SAFE_Q.items() if k not in ("orm", "broker_class")}
    (error,) = found("weave.E009")
    assert "names no broker" in error.msg and "Redis on localhost:6379" in error.msg
    assert 'Q_CLUSTER["orm"] = "default"' in error.hint

    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "orm": "default", "broker_class": "weave.broker.DatabaseClockORM"}
    assert found("weave.E009") == []


def test_orm_broker_class_without_orm_is_named(settings):
    settings.Q_CLUSTER = {k: v for k, v in SAFE_Q.items() if k != "orm"}
    (error,) = found("weave.E009")
    assert "has no 'orm'" in error.msg


def test_redis_broker_without_the_redis_package_names_the_extra(settings, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "redis" else real(name, *a))
    settings.Q_CLUSTER = {
        **{k: v for k, v in SAFE_Q.items() if k not in ("orm", "broker_class")},
        "redis": "redis://127.0.0.1:6379/0",
        "broker_class": "weave.broker_redis.PooledRedis",
    }
    (error,) = found("weave.E009")
    assert "redis package is not installed" in error.msg
    assert 'pip install "weave-jobs[redis]"' in error.hint


def test_webhook_without_a_token_is_named(settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_URL": "https://push.example.com/v1/send", "PUSH_TOKEN": ""}
    (warning,) = found("notifications.W006")
    assert "'default'" in warning.msg and "no Authorization header" in warning.msg
    assert "Set WEAVE['PUSH_TOKEN']" in warning.hint

    settings.WEAVE = {**settings.WEAVE, "PUSH_TOKEN": "from-the-environment"}
    assert found("notifications.W006") == []


def test_webhook_entry_of_push_backends_without_a_token_names_its_option(settings):
    hook = {"BACKEND": "notifications.backends.webhook.WebhookBackend", "OPTIONS": {"url": "https://gw.example/p"}}
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"gateway": hook}}
    (warning,) = found("notifications.W006")
    assert "WEAVE['PUSH_BACKENDS']['gateway']['OPTIONS']['token']" in warning.hint


def test_onboarding_without_supplier_api_url_is_named(settings):
    settings.WEAVE = {k: v for k, v in settings.WEAVE.items() if k != "SUPPLIER_API_URL"}
    (error,) = found("onboarding.E005")
    assert error.is_serious()
    assert "SUPPLIER_API_URL" in error.msg
    assert "Set WEAVE['SUPPLIER_API_URL']" in error.hint and "weave_fake_suppliers" in error.hint

    settings.WEAVE = {**settings.WEAVE, "SUPPLIER_API_URL": "https://suppliers.example.com"}
    assert found("onboarding.E005") == []


def test_missing_fcm_credentials_file_hint_names_the_file_not_push_url(settings, tmp_path):
    missing = tmp_path / "fcm-service-account.json"
    fcm = {"BACKEND": "notifications.backends.fcm.FCMBackend",
           "OPTIONS": {"project_id": "my-app", "credentials_file": str(missing)}}  # fmt: skip
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"phones": fcm}}
    (error,) = found("notifications.E003")
    assert "'phones'" in error.msg and "is not a file" in error.msg
    assert "PUSH_URL" not in error.hint
    assert "service-account JSON key" in error.hint and "readable" in error.hint
    assert "docs/backends/fcm.md" in error.hint


def test_missing_apns_option_hint_says_what_to_set(settings, tmp_path):
    apns = {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": {"team_id": "T", "key_id": "K"}}
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"ios": apns}}
    hints = {e.msg: e.hint for e in found("notifications.E003")}
    key_file = next(h for m, h in hints.items() if "'key_file'" in m)
    assert key_file.startswith("Set WEAVE['PUSH_BACKENDS']['ios']['OPTIONS']['key_file'] to the .p8")


def test_empty_push_url_hint_still_names_push_url(settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_URL": "", "PUSH_BACKENDS": None}
    (error,) = found("notifications.E003")
    assert "Set WEAVE['PUSH_URL']" in error.hint

"""The system checks refuse an unsafe Q_CLUSTER and unknown WEAVE keys, with clear messages."""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from notifications.checks import check_provider_url, check_push_settings
from onboarding.checks import check_onboarding_budget
from weave.checks import (
    check_lease_ttls,
    check_q_cluster,
    check_sqlite_in_production,
    check_weave_settings,
)

SAFE = {"name": "t", "orm": "default", "timeout": 120, "retry": 300, "max_attempts": 3}


def ids(errors):
    return [e.id for e in errors]


def test_safe_q_cluster_passes(settings):
    settings.Q_CLUSTER = SAFE
    assert check_q_cluster() == []


@pytest.mark.parametrize(
    ("override", "expected_id", "words"),
    [
        ({"timeout": None}, "weave.E002", "timeout"),
        ({"retry": 120}, "weave.E003", "must be greater than 'timeout'"),
        ({"retry": 60}, "weave.E003", "second worker"),
        ({"max_attempts": 0}, "weave.E004", "re-run forever"),
    ],
)
def test_unsafe_q_cluster_is_refused(settings, override, expected_id, words):
    settings.Q_CLUSTER = {**SAFE, **override}
    errors = check_q_cluster()
    assert ids(errors) == [expected_id]
    assert words in errors[0].msg


def test_retry_left_at_django_q_default_is_refused(settings):
    settings.Q_CLUSTER = {k: v for k, v in SAFE.items() if k != "retry"}  # django-q2 default retry is 60
    assert ids(check_q_cluster()) == ["weave.E003"]


def test_missing_q_cluster_is_refused(settings):
    del settings.Q_CLUSTER
    assert ids(check_q_cluster()) == ["weave.E001"]


def test_manage_py_check_fails_on_unsafe_q_cluster(settings):
    settings.Q_CLUSTER = {**SAFE, "retry": 100}
    with pytest.raises(SystemCheckError, match="retry"):
        call_command("check")


def test_unknown_weave_key_is_refused(settings):
    settings.WEAVE = {"PUSH_URLL": "http://x"}
    errors = check_weave_settings()
    assert ids(errors) == ["weave.E005"] and "PUSH_URLL" in errors[0].msg


def test_retired_wake_keys_are_ignored_with_a_warning_naming_them(settings):
    """An existing site's WEAVE that still sets the timings that became fixed keeps working."""
    from weave.conf import weave_settings
    from weave.wake import Watcher

    settings.WEAVE = {**settings.WEAVE, "WAKE_HOLD": 10.0, "WAKE_POLL_MAX": 5.0, "WAKE_LINGER": 1.0}
    errors = check_weave_settings()
    assert ids(errors) == ["weave.W047"] and errors[0].level < 40  # a warning: `check` still passes
    assert "WAKE_HOLD" in errors[0].msg and "WAKE_POLL_MAX" in errors[0].msg and "WAKE_LINGER" not in errors[0].msg
    assert weave_settings.WAKE_LINGER == 1.0
    assert Watcher([]).longest_sleep() == 1.0  # the fixed poll, not the retired setting's 5 s
    call_command("check")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("PUSH_TIMEOUT", "10", "must be a number above 0, not str"),
        ("PUSH_TIMEOUT", 0, "must be a number above 0"),
        ("PUSH_TIMEOUT", float("nan"), "not nan"),
        ("PUSH_BATCH_SIZE", 2.5, "must be a whole number of at least 1, not float"),
        ("PUSH_BATCH_SIZE", 0, "of at least 1"),
        ("PUSH_CONCURRENCY", True, "not bool"),
        ("PUSH_BACKOFF_BASE", -1, "of at least 0"),
        ("ONBOARDING_STEP_RETRIES", -1, "of at least 0"),
        ("PUSH_URL", None, "must be a string, not None"),
        ("PUSH_TOKEN", 123, "must be a string, not int"),
        ("HEARTBEAT_INTERVAL", 0, "above 0 or None"),
        ("LEASE_TTL", -5, "above 0"),
    ],
)
def test_weave_value_of_wrong_type_or_range_is_refused(settings, key, value, words):
    settings.WEAVE = {"PUSH_URL": "http://x", key: value}
    errors = check_weave_settings()
    assert ids(errors) == ["weave.E006"]
    assert f"WEAVE['{key}']" in errors[0].msg and words in errors[0].msg


def test_every_weave_default_passes_its_own_check(settings):
    from weave.conf import DEFAULTS

    settings.WEAVE = dict(DEFAULTS)
    assert check_weave_settings() == []


def test_weave_numbers_accept_ints_and_none_where_allowed(settings):
    settings.WEAVE = {"PUSH_TIMEOUT": 5, "PUSH_BUDGET": 30.5, "HEARTBEAT_INTERVAL": None, "ONBOARDING_STEP_RETRIES": 0}
    assert check_weave_settings() == []


def test_weave_that_is_not_a_dict_is_refused(settings):
    settings.WEAVE = ["PUSH_URL"]
    errors = check_weave_settings()
    assert ids(errors) == ["weave.E006"] and "must be a dict" in errors[0].msg


def test_checks_that_compare_keys_leave_a_bad_value_to_e006(settings):
    settings.Q_CLUSTER = SAFE
    settings.WEAVE = {"PUSH_URL": "http://x", "PUSH_TIMEOUT": "10", "ONBOARDING_BUDGET": "90", "LEASE_TTL": "x"}
    assert check_push_settings() == []
    assert check_onboarding_budget() == []
    assert check_lease_ttls() == []
    assert ids(check_weave_settings()) == ["weave.E006"] * 3


def test_app_lease_ttls_fall_back_to_lease_ttl(settings):
    from weave.conf import weave_settings

    settings.WEAVE = {"LEASE_TTL": 12}
    assert (weave_settings.PUSH_LEASE_TTL, weave_settings.ONBOARDING_LEASE_TTL) == (12, 12)
    settings.WEAVE = {"LEASE_TTL": 12, "PUSH_LEASE_TTL": 40}
    assert (weave_settings.PUSH_LEASE_TTL, weave_settings.ONBOARDING_LEASE_TTL) == (40, 12)
    settings.WEAVE = {}
    assert (weave_settings.PUSH_LEASE_TTL, weave_settings.ONBOARDING_LEASE_TTL) == (30.0, 30.0)


def test_weave_settings_are_read_lazily(settings):
    from weave.conf import weave_settings

    settings.WEAVE = {"LEASE_TTL": 7}
    assert weave_settings.LEASE_TTL == 7
    settings.WEAVE = {}
    assert weave_settings.LEASE_TTL == 30.0


def test_lease_ttl_shorter_than_three_heartbeats_is_refused(settings):
    settings.WEAVE = {"PUSH_URL": "http://x", "HEARTBEAT_INTERVAL": 5, "ONBOARDING_LEASE_TTL": 12}
    errors = check_lease_ttls()
    assert ids(errors) == ["weave.E010"]
    assert "ONBOARDING_LEASE_TTL" in errors[0].msg and "three heartbeat intervals" in errors[0].msg
    settings.WEAVE = {"PUSH_URL": "http://x", "HEARTBEAT_INTERVAL": 5, "ONBOARDING_LEASE_TTL": 15}
    assert check_lease_ttls() == []


def test_onboarding_budget_at_or_above_q_timeout_is_refused(settings):
    settings.Q_CLUSTER = SAFE
    settings.WEAVE = {"ONBOARDING_BUDGET": 120}
    errors = check_onboarding_budget()
    assert ids(errors) == ["onboarding.E001"] and "ONBOARDING_BUDGET" in errors[0].msg
    settings.WEAVE = {"ONBOARDING_BUDGET": 119}
    assert check_onboarding_budget() == []


def test_missing_provider_url_is_refused_when_notifications_installed(settings):
    settings.WEAVE = {"PUSH_URL": ""}
    errors = check_provider_url()
    assert ids(errors) == ["notifications.E003"]
    settings.WEAVE = {"PUSH_URL": "http://push.example"}
    assert check_provider_url() == []


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_sqlite_in_production_with_several_workers_warns(settings):
    settings.DATABASES = {"default": {**settings.DATABASES["default"], "ENGINE": "django.db.backends.sqlite3"}}
    settings.DEBUG = False
    settings.Q_CLUSTER = {**SAFE, "workers": 4}
    warnings = check_sqlite_in_production()
    assert ids(warnings) == ["weave.W013"] and "SQLite" in warnings[0].msg
    settings.DEBUG = True
    assert check_sqlite_in_production() == []
    settings.DEBUG = False
    settings.Q_CLUSTER = {**SAFE, "workers": 1}
    assert check_sqlite_in_production() == []


def test_a_task_backend_timeout_past_the_q_cluster_timeout_is_warned(settings):
    """django-q2 stops a drain at Q_CLUSTER['timeout']: a backend TIMEOUT that does not fit after a
    drain's 60 s of starting tasks would be cut short on every attempt."""
    from weave.checks import check_task_timeouts

    settings.Q_CLUSTER = SAFE  # timeout 120
    settings.TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend", "OPTIONS": {"TIMEOUT": 300}}}
    (warning,) = check_task_timeouts()
    assert warning.id == "weave.W048" and warning.level < 40
    assert "'default'" in warning.msg and "300 s" in warning.msg and "120 s" in warning.msg
    assert "at least 360 s" in warning.hint


def test_the_documented_task_backend_and_q_cluster_pass_the_timeout_check(settings):
    from weave.checks import check_task_timeouts

    settings.Q_CLUSTER = SAFE
    settings.TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend"}}  # the default TIMEOUT, 60 s
    assert check_task_timeouts() == []
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend", "OPTIONS": {}}}
    assert check_task_timeouts() == []

"""WEAVE_<KEY> environment variables, read by demo/settings.py itself (in a fresh process, as a worker reads them)."""

import pytest

from notifications.apps import PushSettings
from onboarding.apps import OnboardingSettings
from weave.conf import WeaveSettings

from .site_env import run_settings, weave_settings_under


def test_numeric_keys_are_read_with_their_own_types():
    weave = weave_settings_under(
        {"WEAVE_PUSH_LEASE_TTL": "4.5", "WEAVE_PUSH_BATCH_SIZE": "7", "WEAVE_ONBOARDING_STEP_RETRIES": "0"}
    )
    assert weave["PUSH_LEASE_TTL"] == 4.5 and isinstance(weave["PUSH_LEASE_TTL"], float)
    assert weave["PUSH_BATCH_SIZE"] == 7 and isinstance(weave["PUSH_BATCH_SIZE"], int)
    assert weave["ONBOARDING_STEP_RETRIES"] == 0


def test_a_float_key_takes_a_whole_number():
    assert weave_settings_under({"WEAVE_LEASE_TTL": "12"})["LEASE_TTL"] == 12.0


@pytest.mark.parametrize(
    ("raw", "value"), [("true", True), ("1", True), ("Yes", True), ("on", True), ("false", False), ("0", False)]
)
def test_flags_read_the_usual_spellings(raw, value):
    assert weave_settings_under({"WEAVE_WAKE_WATCHER": raw})["WAKE_WATCHER"] is value


def test_every_numeric_key_can_be_set_from_the_environment():
    # The demo site's keys: the core's and its two apps' (the test site adds apps of its own).
    declared = {**WeaveSettings.keys(), **PushSettings.keys(), **OnboardingSettings.keys()}
    numeric = {name: key for name, key in declared.items() if key.kind in (int, float)}
    env = {f"WEAVE_{name}": "3" for name in numeric}
    weave = weave_settings_under(env)
    assert {name: weave.get(name) for name in numeric} == {name: 3 for name in numeric}


def test_without_variables_no_override_is_added():
    weave = weave_settings_under({})
    assert not {"PUSH_LEASE_TTL", "PUSH_BATCH_SIZE", "WAKE_WATCHER"} & set(weave)


@pytest.mark.parametrize(
    ("variable", "raw", "expected"),
    [
        ("WEAVE_PUSH_BATCH_SIZE", "ten", "a whole number"),
        ("WEAVE_PUSH_BATCH_SIZE", "2.5", "a whole number"),
        ("WEAVE_PUSH_LEASE_TTL", "30s", "a number"),
        ("WEAVE_WAKE_WATCHER", "ture", "True or False"),
    ],
)
def test_a_malformed_value_stops_the_start_naming_the_variable(variable, raw, expected):
    done = run_settings({variable: raw})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured")
    assert f"{variable}={raw!r}" in last and expected in last

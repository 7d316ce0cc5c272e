"""System checks on push settings."""

from notifications.checks import check_push_settings


def test_checks__accept_the_defaults():
    assert check_push_settings() == []


def test_checks__refuse_a_lease_shorter_than_a_request(settings):
    settings.WEAVE = {"PUSH_LEASE_TTL": 5, "PUSH_TIMEOUT": 10}
    assert [e.id for e in check_push_settings()] == ["notifications.E001"]


def test_checks__refuse_a_budget_that_outlasts_the_task_timeout(settings):
    settings.WEAVE = {"PUSH_BUDGET": 115, "PUSH_TIMEOUT": 10}
    assert [e.id for e in check_push_settings()] == ["notifications.E002"]

"""System checks on push settings."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from notifications.checks import check_push_settings
from notifications.delivery import PushWorker


def test_checks__accept_the_defaults():
    assert check_push_settings() == []


def test_checks__refuse_a_lease_shorter_than_a_request(settings):
    settings.WEAVE = {"PUSH_LEASE_TTL": 5, "PUSH_TIMEOUT": 10}
    assert [e.id for e in check_push_settings()] == ["notifications.E001"]


def test_checks__refuse_a_budget_that_outlasts_the_task_timeout(settings):
    settings.WEAVE = {"PUSH_BUDGET": 115, "PUSH_TIMEOUT": 10}
    assert [e.id for e in check_push_settings()] == ["notifications.E002"]


@pytest.mark.parametrize("url", ["", "localhost:8100/push"])
def test_worker__refuses_to_start_without_a_usable_push_url(settings, url):
    settings.WEAVE = {"PUSH_URL": url}
    with pytest.raises(ImproperlyConfigured, match="PUSH_URL"):
        PushWorker()

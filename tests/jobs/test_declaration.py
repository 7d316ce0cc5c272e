"""A new job type is one declaration in its own app (tests/jobs/shipping): the core checks it from there."""

import pytest

from weave.checks import check_lease_ttls, check_weave_settings
from weave.conf import KEYS, weave_settings
from weave.explain import explainers
from weave.jobs import get, ttl_settings
from weave.schedules import registered_schedules
from weave.telemetry import lease_jobs
from weave.wake import registered_watches


def ids(errors):
    return [e.id for e in errors]


def test_declared_keys_are_known_to_the_unknown_key_check(settings):
    settings.WEAVE = {"SHIPPING_LEASE_TTL": 20, "SHIPPING_CARRIER_URL": "https://carrier.example"}
    assert check_weave_settings() == []
    settings.WEAVE = {"SHIPPING_LEASE_TTLL": 20}
    errors = check_weave_settings()
    assert ids(errors) == ["weave.E005"] and "SHIPPING_LEASE_TTLL" in errors[0].msg


def test_declared_keys_are_type_checked(settings):
    settings.WEAVE = {"SHIPPING_LEASE_TTL": "20"}
    errors = check_weave_settings()
    assert ids(errors) == ["weave.E006"] and "WEAVE['SHIPPING_LEASE_TTL']" in errors[0].msg


def test_the_declared_ttl_is_checked_against_the_heartbeat(settings):
    assert "SHIPPING_LEASE_TTL" in ttl_settings()
    settings.WEAVE = {"HEARTBEAT_INTERVAL": 5, "SHIPPING_LEASE_TTL": 12}
    errors = check_lease_ttls()
    assert ids(errors) == ["weave.E010"] and "SHIPPING_LEASE_TTL" in errors[0].msg


def test_weave_settings_reads_a_declared_key_with_its_fallback(settings):
    settings.WEAVE = {"LEASE_TTL": 12}
    assert weave_settings.SHIPPING_LEASE_TTL == 12
    settings.WEAVE = {"LEASE_TTL": 12, "SHIPPING_LEASE_TTL": 40}
    assert weave_settings.SHIPPING_LEASE_TTL == 40
    assert get("shipment").lease_ttl() == 40
    with pytest.raises(AttributeError, match="no installed app declares it"):
        _ = weave_settings.SHIPPING_NOTHING


def test_the_apps_keys_moved_out_of_the_core_but_read_the_same(settings):
    # The push and onboarding keys are declared by their apps, and read through weave_settings as before.
    assert KEYS["PUSH_LEASE_TTL"].doc and KEYS["ONBOARDING_STEPS"].doc
    settings.WEAVE = {"PUSH_BATCH_SIZE": 7}
    assert weave_settings.PUSH_BATCH_SIZE == 7
    from weave.conf import WeaveSettings

    assert not {"PUSH_URL", "SUPPLIER_API_URL", "ONBOARDING_BUDGET"} & set(vars(WeaveSettings))


def test_registering_fills_every_core_registry():
    assert lease_jobs()["shipment"].__name__ == "Shipment"
    assert "shipment" in explainers()
    assert "shipment" in {w.name for w in registered_watches()}
    assert "weave.jobs.sweep" in {s.name for s in registered_schedules()}
    # The built-in job types fill the same registries from their single declarations.
    assert {"notification", "onboarding"} <= set(lease_jobs())
    assert {"notifications", "onboarding"} <= {w.name for w in registered_watches()}
    assert {"notification", "run"} <= set(explainers())


def test_a_declaration_that_cannot_work_is_refused():
    from django.core.exceptions import ImproperlyConfigured

    from tests.jobs.shipping.models import Shipment
    from weave.jobs import JobType, register

    with pytest.raises(ImproperlyConfigured, match="not a declared WEAVE key"):
        register(JobType(name="broken", model=Shipment, ttl_setting="NO_SUCH_TTL", handler=print))
    with pytest.raises(LookupError):
        get("broken")


def test_an_own_attempt_needs_its_due_rows_and_excludes_a_handler():
    from django.core.exceptions import ImproperlyConfigured

    from tests.jobs.shipping.models import Shipment
    from weave.jobs import JobType, register

    with pytest.raises(ImproperlyConfigured, match="attempt and due_rows go together"):
        register(JobType(name="broken", model=Shipment, attempt=str))
    with pytest.raises(ImproperlyConfigured, match="not both"):
        register(JobType(name="broken", model=Shipment, attempt=str, due_rows=Shipment.objects.all, handler=print))
    with pytest.raises(LookupError):
        get("broken")
    # The built-in onboarding declares its own attempt: the engine drains it, its runner does the rest.
    onboarding = get("onboarding")
    assert onboarding.drained and not onboarding.runnable and onboarding.attempt is not None

"""Onboarding's public services refuse wrong arguments with a ValidationError naming them, storing nothing."""

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notifications.services import notification_cancel, notification_retry_now
from onboarding.models import OnboardingRun, Supplier
from onboarding.services import onboarding_cancel, onboarding_resume, onboarding_start
from tests.factories import OnboardingRunFactory, SupplierFactory

pytestmark = pytest.mark.django_db


def field_of(call, **kwargs):
    before = OnboardingRun.objects.count()
    with pytest.raises(ValidationError) as caught:
        call(**kwargs)
    assert OnboardingRun.objects.count() == before
    return caught.value.message_dict


def test_start__supplier_none_says_a_supplier_is_required():
    errors = field_of(onboarding_start, supplier=None)
    assert "supplier" in errors and "required" in errors["supplier"][0]
    assert "active run" not in errors["supplier"][0]


@pytest.mark.parametrize("supplier", [42, "Acme", object(), {"pk": 1}])
def test_start__a_non_supplier_is_refused(supplier):
    assert "supplier" in field_of(onboarding_start, supplier=supplier)


def test_start__an_unsaved_supplier_is_refused_and_the_transaction_stays_usable():
    with transaction.atomic():
        assert "supplier" in field_of(onboarding_start, supplier=Supplier(legal_name="Not saved"))
        run = onboarding_start(supplier=SupplierFactory())  # the same transaction still works
    assert OnboardingRun.objects.filter(pk=run.pk).exists()


@pytest.mark.parametrize("who", ["admin", 7, object()])
def test_start__started_by_must_be_a_user_or_none(who):
    assert "started_by" in field_of(onboarding_start, supplier=SupplierFactory(), started_by=who)


def test_start__anonymous_user_counts_as_nobody():
    run = onboarding_start(supplier=SupplierFactory(), started_by=AnonymousUser())
    assert run.created_by is None


@pytest.mark.parametrize("run", [None, 5, "run", object()])
def test_resume_and_cancel__refuse_a_non_run(run):
    assert "run" in field_of(onboarding_resume, run=run)
    assert "run" in field_of(onboarding_cancel, run=run)


def test_cancel__cancelled_by_must_be_a_user_or_none():
    run = OnboardingRunFactory()
    assert "cancelled_by" in field_of(onboarding_cancel, run=run, cancelled_by="mallory")
    assert OnboardingRun.objects.get(pk=run.pk).status == "pending"


@pytest.mark.parametrize(
    ("ids", "who", "field"),
    [
        ("12", "", "notification_ids"),
        ([True], "", "notification_ids"),
        ([1.5], "", "notification_ids"),
        (None, "", "notification_ids"),
        ([1], None, "requested_by"),
        ([1], "a\x00b", "requested_by"),
        ([1], "x\nforged", "requested_by"),
    ],
)
def test_notification_actions__refuse_bad_ids_and_names(ids, who, field):
    for action in (notification_retry_now, notification_cancel):
        with pytest.raises(ValidationError) as caught:
            action(notification_ids=ids, requested_by=who)
        assert field in caught.value.message_dict


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.none(), st.integers(), st.text(), st.binary(), st.lists(st.integers()), st.floats()))
def test_start__fuzzed_arguments_are_refused_naming_the_field(value):
    for kwargs, field in (({"supplier": value}, "supplier"), ({"run": value}, "run")):
        call = onboarding_start if field == "supplier" else onboarding_resume
        with pytest.raises(ValidationError) as caught:
            call(**kwargs)
        assert field in caught.value.message_dict

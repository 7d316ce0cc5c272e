"""factory-boy factories shared by the tests."""

import factory

from notifications.models import Notification
from tests.leasetest.models import Job


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job


class NotificationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Notification

    device_token = factory.Sequence(lambda n: f"device-{n:06d}")
    title = factory.Sequence(lambda n: f"Hello {n}")
    body = "A message from Weave."
    data = factory.LazyFunction(dict)


# --- onboarding ---------------------------------------------------------------------------------

from onboarding.models import OnboardingRun, Supplier  # noqa: E402
from onboarding.steps.plan import configured_plan  # noqa: E402
from onboarding.testing.numbers import german_iban, german_vat_number  # noqa: E402


class SupplierFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Supplier

    legal_name = factory.Sequence(lambda n: f"Acme Parts {n} GmbH")
    country = "DE"
    # Well-formed numbers (checksums hold): validation refuses anything else before a run starts.
    tax_id = factory.Sequence(german_vat_number)
    contact_email = factory.Sequence(lambda n: f"buyer{n}@acme.example")
    device_token = factory.Sequence(lambda n: f"supplier-device-{n:06d}")
    iban = factory.Sequence(german_iban)


class OnboardingRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = OnboardingRun

    supplier = factory.SubFactory(SupplierFactory)
    plan = factory.LazyFunction(configured_plan)  # as onboarding_start records it

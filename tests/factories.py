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


class SupplierFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Supplier

    legal_name = factory.Sequence(lambda n: f"Acme Parts {n} GmbH")
    country = "DE"
    tax_id = factory.Sequence(lambda n: f"DE{100000000 + n}")
    contact_email = factory.Sequence(lambda n: f"buyer{n}@acme.example")
    device_token = factory.Sequence(lambda n: f"supplier-device-{n:06d}")
    iban = factory.Sequence(lambda n: f"DE89370400440532{n:06d}")


class OnboardingRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = OnboardingRun

    supplier = factory.SubFactory(SupplierFactory)

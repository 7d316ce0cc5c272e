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

"""The demo's outage fault: the fake provider answers 503 for a while, then gets its own faults back."""

import pytest
from django.core.management import call_command

from notifications.models import Notification
from notifications.testing.fake_provider import FakePushProvider

pytestmark = pytest.mark.django_db


def test_outage__queues_a_burst_into_a_503_window_then_restores_the_faults():
    with FakePushProvider(rate_5xx=0.12) as fake:
        base = fake.push_url.rsplit("/", 1)[0]
        call_command("weave_demo_outage", provider=base, first_after=0.0, seconds=0.05, outages=1, burst=4, every=1.0)
        assert fake.config.rate_5xx == 0.12  # put back
    assert Notification.objects.filter(device_token__startswith="demo-device-outage-0-").count() == 4

"""The django-q2 entry points are thin: they run a drain and return its report."""

import pytest

from notifications import tasks
from notifications.models import Notification
from tests.factories import NotificationFactory
from weave.leases import DatabaseClock

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("entry_point", [tasks.drain, tasks.sweep])
def test_task__delivers_due_rows_and_returns_the_report(push_settings, fake, entry_point):
    NotificationFactory.create_batch(3)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())
    report = entry_point()
    assert report["delivered"] == 3 and report["claimed"] == 3
    assert fake.stats()["unique_deliveries"] == 3
    assert entry_point()["claimed"] == 0  # nothing due any more

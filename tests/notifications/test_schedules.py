"""`manage.py weave_schedules` creates the sweep schedule once and keeps it up to date."""

from io import StringIO

import pytest
from django.core.management import call_command
from django_q.models import Schedule

pytestmark = pytest.mark.django_db


def run() -> str:
    out = StringIO()
    call_command("weave_schedules", stdout=out)
    return out.getvalue()


def test_weave_schedules__is_idempotent_and_repairs_drift():
    assert "notifications.sweep: created" in run()
    assert "notifications.sweep: unchanged" in run()
    (sweep,) = Schedule.objects.filter(name="notifications.sweep")
    assert (sweep.func, sweep.schedule_type, sweep.minutes, sweep.repeats) == (
        "notifications.tasks.sweep",
        Schedule.MINUTES,
        1,
        -1,
    )
    Schedule.objects.filter(pk=sweep.pk).update(minutes=15)
    assert "notifications.sweep: updated" in run()
    assert Schedule.objects.get(name="notifications.sweep").minutes == 1
    assert Schedule.objects.count() == 1

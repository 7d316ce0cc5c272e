"""The sweeps exist after `migrate` alone; `manage.py weave_schedules` repairs them and says what it changed."""

from io import StringIO

import pytest
from django.core.management import call_command
from django_q.models import Schedule

from weave.apps import _ensure_schedules_after_migrate

pytestmark = pytest.mark.django_db


def run() -> str:
    out = StringIO()
    call_command("weave_schedules", stdout=out)
    return out.getvalue()


def test_migrate_alone__creates_the_sweeps():
    # The test database was built by `migrate`: nothing here ran weave_schedules. (The test site's own
    # job types add the core's weave.* sweeps.)
    assert sorted(Schedule.objects.values_list("name", flat=True)) == [
        "notifications.sweep",
        "onboarding.sweep",
        "weave.jobs.sweep",
        "weave.tasks.sweep",
    ]
    sweep = Schedule.objects.get(name="notifications.sweep")
    assert (sweep.func, sweep.schedule_type, sweep.minutes, sweep.repeats) == (
        "notifications.tasks.sweep",
        Schedule.MINUTES,
        1,
        -1,
    )


def test_post_migrate__is_idempotent_and_recreates_a_deleted_sweep():
    from django.apps import apps

    Schedule.objects.filter(name="onboarding.sweep").delete()
    out = StringIO()
    _ensure_schedules_after_migrate(apps.get_app_config("weave"), using="default", stdout=out, verbosity=1)
    _ensure_schedules_after_migrate(apps.get_app_config("weave"), using="default", stdout=out, verbosity=1)
    assert out.getvalue() == "  Weave schedule onboarding.sweep: created\n"
    assert Schedule.objects.filter(name__in=["notifications.sweep", "onboarding.sweep"]).count() == 2


def test_weave_schedules__is_idempotent_and_says_what_it_repaired():
    assert "notifications.sweep: unchanged" in run()
    sweep = Schedule.objects.get(name="notifications.sweep")
    Schedule.objects.filter(pk=sweep.pk).update(minutes=15)
    assert "notifications.sweep: updated (minutes 15 -> 1)" in run()
    assert Schedule.objects.get(name="notifications.sweep").minutes == 1
    Schedule.objects.filter(name="onboarding.sweep").delete()
    assert "onboarding.sweep: created" in run()
    assert "notifications.sweep: unchanged" in run()
    assert sorted(Schedule.objects.exclude(name__startswith="weave.").values_list("name", flat=True)) == [
        "notifications.sweep",
        "onboarding.sweep",
    ]

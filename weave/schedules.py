"""A registry of django-q2 schedules that `manage.py weave_schedules` creates or updates idempotently.

Apps register their schedules in `AppConfig.ready()`:

    register_schedule(ScheduleSpec(name="notifications.sweep", func="notifications.tasks.sweep", minutes=1))
"""

from dataclasses import dataclass

_registry: dict[str, "ScheduleSpec"] = {}


@dataclass(frozen=True)
class ScheduleSpec:
    """One django-q2 Schedule, identified by its unique `name`: run `func` every `minutes`."""

    name: str
    func: str
    minutes: int = 1


def register_schedule(spec: ScheduleSpec) -> None:
    """Add (or replace) a schedule in the registry."""
    _registry[spec.name] = spec


def registered_schedules() -> list[ScheduleSpec]:
    """Return the registered schedules, by name."""
    return [_registry[name] for name in sorted(_registry)]


def ensure_schedules() -> list[tuple[str, str]]:
    """Create or update a Schedule row for every registered spec; return (name, "created"|"updated"|"unchanged")."""
    from django_q.models import Schedule

    results = []
    for spec in registered_schedules():
        wanted = {"func": spec.func, "schedule_type": Schedule.MINUTES, "minutes": spec.minutes, "repeats": -1}
        schedule = Schedule.objects.filter(name=spec.name).first()
        if schedule is None:
            Schedule.objects.create(name=spec.name, **wanted)
            results.append((spec.name, "created"))
        elif any(getattr(schedule, key) != value for key, value in wanted.items()):
            for key, value in wanted.items():
                setattr(schedule, key, value)
            schedule.save()
            results.append((spec.name, "updated"))
        else:
            results.append((spec.name, "unchanged"))
    return results

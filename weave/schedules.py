"""django-q2 Schedules that apps register in `AppConfig.ready()`, made after every `migrate` and by
`manage.py weave_schedules`."""

from dataclasses import dataclass

__all__ = [
    "ScheduleSpec",
    "register_schedule",
]

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


def ensure_schedules(using: str = "default") -> list[tuple[str, str]]:
    """Create or update a Schedule per registered spec; return (name, what was done) per spec."""
    from django_q.models import Schedule

    results = []
    for spec in registered_schedules():
        wanted = {"func": spec.func, "schedule_type": Schedule.MINUTES, "minutes": spec.minutes, "repeats": -1}
        schedule = Schedule.objects.using(using).filter(name=spec.name).first() or Schedule(name=spec.name)
        created = schedule.pk is None
        changed = [
            f"{key} {getattr(schedule, key)!r} -> {value!r}"
            for key, value in wanted.items()
            if getattr(schedule, key) != value
        ]
        for key, value in wanted.items():
            setattr(schedule, key, value)
        if changed:
            schedule.save(using=using)
        what = "created" if created else f"updated ({', '.join(changed)})" if changed else "unchanged"
        results.append((spec.name, what))
    return results

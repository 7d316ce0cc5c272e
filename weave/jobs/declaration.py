"""A job type is one declaration: `JobType(...)`, registered once from the app's `AppConfig.ready()`.

    register(JobType(name="notification", model=Notification, settings=PushSettings, ttl_setting=...))

`register()` is the only place that fills the core's registries for a job type (lease counts, the
schedule, the due-time watch, the explainer, the dashboard panel, the latency source for the TTL
advice and the metrics), and `job_types()` is what the core's checks read: a new job type touches
only its own app.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.utils.safestring import SafeString

from weave.conf import KEYS, SettingsGroup
from weave.explain import Explainer, register_explainer
from weave.schedules import ScheduleSpec, register_schedule
from weave.telemetry import LatencySource, Panel, register_latency_source, register_lease_job, register_metrics
from weave.telemetry import register_panel as _register_panel
from weave.wake import WatchSpec, register_watch

LatencyFetch = Callable[[timedelta, int], dict[str, list[float]]]


@dataclass(frozen=True)
class JobType:
    """Everything the core knows about one kind of leased job; only `name` and `model` are required.

    - `name`: the job's label in lease counts, metrics, the TTL advice (e.g. "notification").
    - `key`: the app's registry key for its schedule, watch, panel and metrics; default `name`.
    - `settings`: the app's `SettingsGroup` (its keys are declared by defining it; named here so a
      reader finds them), `ttl_setting` the key of its lease TTL (checked against the heartbeat).
    - `schedule`: a django-q2 sweep; `next_due`/`wake`: the due-time watch.
    - `explainer` (`weave_explain <explain_as> <id>`), `panel`, `latency` (+ `latency_group`,
      `timeout_setting`) and `metrics`: the operator console.
    """

    name: str
    model: type[models.Model]
    key: str = ""
    settings: type[SettingsGroup] | None = None
    ttl_setting: str | None = None
    schedule: ScheduleSpec | None = None
    next_due: Callable[[], datetime | None] | None = None
    wake: Callable[[], object] | None = None
    explainer: Explainer | None = None
    explain_as: str = ""
    panel_title: str = ""
    panel_order: int = 50
    panel: Callable[[datetime], SafeString] | None = None
    latency: LatencyFetch | None = None
    latency_group: str = ""
    timeout_setting: str | None = None
    metrics: Callable[[], Iterable[Any]] | None = None

    @property
    def registry_key(self) -> str:
        return self.key or self.name

    def problems(self) -> list[str]:
        """Say what in this declaration cannot work (a setting nobody declared, a watch half given)."""
        found = []
        for what in ("ttl_setting", "timeout_setting"):
            name = getattr(self, what)
            if name is not None and name not in KEYS:
                found.append(f"{what} {name!r} is not a declared WEAVE key")
        if (self.next_due is None) != (self.wake is None):
            found.append("next_due and wake go together (the watcher needs both)")
        if self.latency is not None and (self.ttl_setting is None or not self.latency_group):
            found.append("latency needs ttl_setting and latency_group (the TTL advice compares them)")
        if self.panel is not None and not self.panel_title:
            found.append("panel needs panel_title")
        return found


_registry: dict[str, JobType] = {}


def register(job: JobType) -> JobType:
    """Register `job` and fill every core registry it names. Call once, from `AppConfig.ready()`."""
    problems = job.problems()
    if problems:
        raise ImproperlyConfigured(f"Job type {job.name!r}: {'; '.join(problems)}.")
    _registry[job.name] = job
    key = job.registry_key
    register_lease_job(job.name, job.model)
    if job.schedule is not None:
        register_schedule(job.schedule)
    if job.next_due is not None and job.wake is not None:
        register_watch(WatchSpec(name=key, next_due=job.next_due, wake=job.wake))
    if job.explainer is not None:
        register_explainer(job.explain_as or job.name, job.explainer)
    if job.panel is not None:
        _register_panel(Panel(key=key, title=job.panel_title, order=job.panel_order, render=job.panel))
    if job.latency is not None and job.ttl_setting is not None:
        register_latency_source(
            LatencySource(
                job=job.name,
                group=job.latency_group,
                ttl_setting=job.ttl_setting,
                timeout_setting=job.timeout_setting,
                fetch=job.latency,
            )
        )
    if job.metrics is not None:
        register_metrics(key, job.metrics)
    return job


def job_types() -> list[JobType]:
    """The registered job types, by name."""
    return [_registry[name] for name in sorted(_registry)]


def ttl_settings() -> list[str]:
    """The core's LEASE_TTL and every registered job type's own TTL key, each once."""
    names = ["LEASE_TTL"]
    for job in job_types():
        if job.ttl_setting is not None and job.ttl_setting not in names:
            names.append(job.ttl_setting)
    return names

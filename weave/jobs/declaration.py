"""A job type is one declaration: `JobType(...)`, registered once from the app's `AppConfig.ready()`.

    register(JobType(name="notification", model=Notification, settings=PushSettings, ttl_setting=...))

`register()` is the only place that fills the core's registries for a job type (lease counts, the
schedule, the due-time watch, the explainer, the dashboard panel, the latency source for the TTL
advice and the metrics), and `job_types()` is what the core's checks read: a new job type touches
only its own app.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models import F
from django.db.models.signals import post_save
from django.utils.safestring import SafeString

from weave.conf import KEYS, SettingsGroup, setting
from weave.explain import Explainer, register_explainer
from weave.jobs.new_work import tell_watchers_of_new_row
from weave.jobs.policy import RetryPolicy
from weave.jobs.steps import Step, accepts, run_to_its_end
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

    A job type the core runs for you (a site's own, on a `weave.models.JobModel`) also gives
    `handler` (one function of a `JobContext`) or `steps`, with `ttl` (seconds, when there is no
    `ttl_setting`), `budget` (seconds one attempt may work) and `retry` (or `retry_for`, a policy
    per job), and `finished`, told of every attempt whose finish landed. Such a type gets the core's
    sweep, due-time watch, runner and explainer unless it names its own. A handler is one step with
    no receipt of its own (the attempt's finish is its receipt); `result_field` names the model
    field its return value is saved to, in the same guarded statement as the finish.

    A job type with a runner and records of its own (onboarding) gives `attempt` instead: `attempt(pk)`
    claims row `pk`, runs one attempt and returns its outcome ("busy" or "not_claimable" when another
    worker holds the row or it needs none), and `due_rows()` is the rows that need a worker now, longest
    due first. The core then asks for its tasks, as for a type it runs: one drain per request, which runs
    one attempt and asks for a helper while more rows are due.

    A job type with a pipeline of its own (push delivery, which claims batches and sends them
    concurrently) gives `pipeline` and `due_rows` instead, with `batch_setting` (the key of its rows per
    claim): `pipeline(task)` delivers due rows until none is left or its budget is spent, and lingers
    for new ones through `task` (a `weave.workers.LingeringTask`). The core asks for its drains, asks
    for a helper while more than a batch is due, and asks again at the end while rows are due.
    `request` names a drained type's request and task (default `weave.jobs.drain:<name>`).
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
    handler: Callable[[Any], Any] | None = None
    steps: tuple[Step, ...] = ()
    ttl: float | None = None
    budget: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    result_field: str = ""  # a handler's return value is saved here by the guarded finish
    # The policy of one job when its own row says how it retries (e.g. a task's options); default `retry`.
    retry_for: Callable[[Any], RetryPolicy] | None = None
    # More fields the claim writes in its own statement (e.g. start times), given the claim's clock.
    claim_fields: Callable[[Any], Mapping[str, Any]] | None = None
    # Called after an attempt's finish landed (done, retry or failed), with its context and outcome.
    finished: Callable[[Any, str], None] | None = None
    # In batch mode, told once per written group instead: (context, outcome, its attempt record as stored).
    finished_many: Callable[[list[tuple[Any, str, dict[str, Any] | None]]], None] | None = None
    # What giving back a claimed row that was never started writes besides the attempt counter (the
    # claim's own `claim_fields` undone), or None when the row must run rather than be given back.
    unclaim_fields: Callable[[Any], Mapping[str, Any] | None] | None = None
    # The handler records the attempt a takeover found without a finish itself (tasks do, to say
    # whether it ran past its timeout); otherwise the core records it before the handler runs.
    records_takeovers: bool = False
    attempt: Callable[[Any], str] | None = None
    due_rows: Callable[[], Any] | None = None
    pipeline: Callable[[Any], Mapping[str, Any]] | None = None
    batch_setting: str | None = None
    request: str = ""

    def policy(self, job: Any) -> RetryPolicy:
        """The retry policy of `job`: its own (`retry_for`) when the type gives one, else the type's."""
        return self.retry if self.retry_for is None else self.retry_for(job)

    def claim_writes(self, clock: Any) -> dict[str, Any]:
        """What a claim of this type writes besides the lease: the attempt counter, the previous holder
        (on a `JobModel`), and `claim_fields`."""
        extra = {} if self.claim_fields is None else dict(self.claim_fields(clock))
        return {"attempts": F("attempts") + 1, **self._holder_writes(clock), **extra}

    def _holder_writes(self, clock: Any) -> dict[str, Any]:
        """The claim's own time, and who held the row before it (`weave.jobs.takeover`), on a `JobModel`."""
        if not hasattr(self.model, "previous_owner"):
            return {}
        # In the claim's own statement: the right-hand sides read the row as it was before the claim,
        # so a takeover knows the holder it replaced without a read of its own.
        return {
            "last_attempted_at": clock.now(),
            "previous_owner": F("owner"),
            "previous_fence": F("fence"),
            "previous_expires_at": F("lease_expires_at"),
            "previous_attempted_at": F("last_attempted_at"),
        }

    @property
    def registry_key(self) -> str:
        return self.key or self.name

    @property
    def runnable(self) -> bool:
        """Whether the core runs this job type (it has a handler or steps)."""
        return self.handler is not None or bool(self.steps)

    @property
    def drained(self) -> bool:
        """Whether the core asks for this type's tasks: it runs the type, or the type gives its own `attempt`
        or `pipeline`."""
        return self.runnable or self.attempt is not None or self.pipeline is not None

    def has_due_rows(self) -> bool:
        """Whether a row of this drained type needs a worker now."""
        if self.due_rows is not None:
            return bool(self.due_rows().exists())
        manager: Any = self.model._default_manager
        return bool(manager.due().exists() or manager.undo_due().exists())

    @property
    def undoable(self) -> bool:
        """Whether a job of this type can be cancelled and undone (a step of it declares an undo)."""
        return any(step.undoable for step in self.steps)

    def plan(self) -> tuple[Step, ...]:
        """The steps an attempt walks through: the handler is a plan of one step, "run"."""
        if self.handler is not None:
            return (Step("run", self.handler),)
        return self.steps

    def lease_ttl(self) -> float:
        """This type's lease TTL in seconds: its TTL key, else `ttl`, else WEAVE LEASE_TTL."""
        if self.ttl_setting is not None:
            return float(setting(self.ttl_setting))
        if self.ttl is not None:
            return float(self.ttl)
        return float(setting("LEASE_TTL"))

    def __post_init__(self) -> None:
        # Wrapped once, where the type is declared, as a step's parts are: the runner calls it as it is.
        object.__setattr__(self, "handler", run_to_its_end(self.handler))

    def problems(self) -> list[str]:
        """Say what in this declaration cannot work (a setting nobody declared, a watch half given)."""
        found = [
            f"{what} {name!r} is not a declared WEAVE key"
            for what in ("ttl_setting", "timeout_setting", "batch_setting")
            if (name := getattr(self, what)) is not None and name not in KEYS
        ]
        names = [step.name for step in self.steps]
        broken_rules = (
            ((self.next_due is None) != (self.wake is None), "next_due and wake go together (the watcher needs both)"),
            (
                self.latency is not None and (self.ttl_setting is None or not self.latency_group),
                "latency needs ttl_setting and latency_group (the TTL advice compares them)",
            ),
            (self.panel is not None and not self.panel_title, "panel needs panel_title"),
            (self.handler is not None and bool(self.steps), "give a handler or steps, not both"),
            (
                self.handler is not None and not accepts(self.handler, "ctx"),
                f"its handler {_qualname(self.handler)} is called with one argument, the job's context, and cannot "
                "take it",
            ),
            (self.attempt is not None and self.runnable, "give an attempt or a handler or steps, not both"),
            (bool(self.result_field) and self.handler is None, "result_field goes with a handler"),
            (self.ttl is not None and self.ttl <= 0, "ttl must be above 0 seconds"),
            (len(set(names)) != len(names), "step names must be unique (receipts are kept per step)"),
        )
        rules = broken_rules + self._own_drain_rules()
        return found + self._model_problems() + [message for broken, message in rules if broken]

    def _own_drain_rules(self) -> tuple[tuple[bool, str], ...]:
        """What an own `attempt` or `pipeline` needs: the due rows its drain lists, and a batch size."""
        own = [what for what in ("attempt", "pipeline") if getattr(self, what) is not None]
        return (
            (
                self.attempt is not None and self.due_rows is None,
                "attempt and due_rows go together (a drain needs both)",
            ),
            (
                self.due_rows is not None and not own,
                "due_rows goes with an attempt or a pipeline (its drain lists them)",
            ),
            (
                self.pipeline is not None and (self.due_rows is None or self.batch_setting is None),
                "pipeline needs due_rows and batch_setting (its drain asks for a helper past one batch)",
            ),
            (
                len(own) > 1 or (self.pipeline is not None and self.runnable),
                "give one of an attempt, a pipeline, a handler or steps",
            ),
        )

    def _model_problems(self) -> list[str]:
        """What the core-run model lacks: the job fields, or the field that keeps the result."""
        from weave.models import JobModel

        found = []
        if self.runnable and not issubclass(self.model, JobModel):
            found.append(
                f"{self.model.__name__} is not a weave.models.JobModel (the core keeps its lease and state there)"
            )
        if self.result_field and self.result_field not in {f.name for f in self.model._meta.get_fields()}:
            found.append(f"result_field {self.result_field!r} is not a field of {self.model.__name__}")
        return found


_registry: dict[str, JobType] = {}


def register(job: JobType) -> JobType:
    """Register `job` and fill every core registry it names. Call once, from `AppConfig.ready()`."""
    problems = job.problems()
    if problems:
        raise ImproperlyConfigured(f"Job type {job.name!r}: {'; '.join(problems)}.")
    if job.drained:
        job = _with_core_runner(job)
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
    for hook in _on_register:
        hook(job)
    return job


_on_register: list[Callable[[JobType], None]] = []


def on_register(hook: Callable[[JobType], None]) -> None:
    """Call `hook(job)` for each job type registered from now on (the admin gives late ones its job admin)."""
    if hook not in _on_register:
        _on_register.append(hook)


def _with_core_runner(job: JobType) -> JobType:
    """Fill in what the core provides for a job type it drains: the sweep, the watch and the explainer."""
    from weave.jobs import queue
    from weave.jobs.explain import explainer_for

    model: Any = job.model
    queue.name_requests(job.name, request=job.request, group=job.registry_key)
    defaults: dict[str, Any] = {}
    if job.schedule is None:
        # One sweep for every job type the core runs; registering it again changes nothing.
        defaults["schedule"] = ScheduleSpec(name="weave.jobs.sweep", func="weave.jobs.tasks.sweep", minutes=1)
    if job.next_due is None:
        defaults["next_due"] = lambda: model.objects.next_due_at()
        defaults["wake"] = lambda: queue.enqueue_due(job)
        post_save.connect(_tell_watchers_of_new_job, sender=model, dispatch_uid=f"weave.jobs.new:{job.name}")
    if job.explainer is None:
        defaults["explainer"] = explainer_for(job.name, model)
    return replace(job, **defaults)


def _tell_watchers_of_new_job(sender: Any, created: bool = False, using: str = "default", **kwargs: Any) -> None:
    """A created row is new due work: the watchers, asleep in LISTEN on PostgreSQL, look after its transaction
    commits (one wake-up per transaction), not at their next idle wake-up up to half a minute later."""
    if created:
        tell_watchers_of_new_row(using)


def get(name: str) -> JobType:
    """The registered job type `name` (`LookupError` when no installed app declares it)."""
    try:
        return _registry[name]
    except KeyError:
        raise LookupError(f"No installed app declares the job type {name!r}.") from None


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


def job(
    model: type[models.Model],
    *,
    name: str = "",
    ttl: float | None = None,
    budget: float | None = None,
    retry: RetryPolicy | None = None,
    result_field: str = "",
) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Declare the decorated function as the handler of a job type whose rows are `model` (a `JobModel`).

        @job(Invoice)
        def send_invoice(ctx): ...

    Put it in your app's `jobs.py`: Weave imports that module of every installed app at start, as
    the admin does with `admin.py`. The job type is named after the model (`invoice`) unless `name`
    is given; `ttl`, `budget`, `retry` and `result_field` are those of `JobType`.
    """

    def declare(handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        declared = JobType(
            name=name or model._meta.model_name or model.__name__.lower(),
            model=model,
            handler=handler,
            ttl=ttl,
            budget=budget,
            retry=retry if retry is not None else RetryPolicy(),
            result_field=result_field,
        )
        _register_once(declared)
        return handler

    return declare


def _register_once(declared: JobType) -> None:
    """Register `declared`, unless the same declaration is already in (a module imported twice)."""
    known = _registry.get(declared.name)
    if known is None:
        register(declared)
        return
    if known.model is not declared.model or _qualname(known.handler) != _qualname(declared.handler):
        raise ImproperlyConfigured(
            f"Job type {declared.name!r} is declared twice: for {known.model.__name__} by "
            f"{_qualname(known.handler)} and for {declared.model.__name__} by {_qualname(declared.handler)}. "
            "Give one of them name=."
        )


def _qualname(func: Callable[..., Any] | None) -> str:
    return "" if func is None else f"{func.__module__}.{func.__qualname__}"


def discover() -> None:
    """Import the `jobs` module of every installed app, so that its `@job` declarations register."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("jobs")

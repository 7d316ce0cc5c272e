"""Weave's own rows.

- `WakeRequest` coalesces wake-up requests; `Dashboard` is an unmanaged stand-in so the admin lists
  the Weave dashboard on its index page and serves it at /admin/weave/dashboard/ (`weave.dashboard`).
- `JobModel` is the abstract base of a site's own job types (`weave.jobs`); `JobAttempt` and
  `JobStepReceipt` are their history, shared by every job type; `TaskRow` holds `django.tasks`
  tasks enqueued through `weave.tasks.WeaveBackend`.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar, cast

from django.db import models, router
from django.db.models import Case, F, Min, Q, When
from django.db.models.expressions import DatabaseDefault

from weave.leases import Clock, DbNow, LeasedModel, LeaseQuerySet, default_clock
from weave.leases.clock import SqlWithParams

__all__ = [
    "DatabaseNow",
    "JobAttempt",
    "JobModel",
    "JobQuerySet",
    "JobState",
    "JobStepReceipt",
]

_J = TypeVar("_J", bound=models.Model)


class DatabaseNow(DbNow):
    """The database's clock as a column's `db_default` (`created_at`): the lease core's "now", no offset.

    On PostgreSQL without a parameter: a default's SQL is written into the table, and Django's schema
    editor adds a default's parameters to others of the same ALTER as a list.
    """

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> SqlWithParams:
        return "clock_timestamp()", cast(tuple[Any, ...], [])


class Dashboard(models.Model):
    class Meta:
        managed = False  # no table: the admin only needs a model to hang the dashboard page on
        default_permissions = ()
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"

    def __str__(self) -> str:
        return "Weave dashboard"


class WakeRequest(models.Model):
    """One row per kind of task Weave asks the workers to run (e.g. `notifications.drain`).

    `queued_until` is set, in one guarded statement, by whoever enqueues the task, and cleared by the
    task when it starts. While it lies in the future another request is already waiting in the broker,
    so a second one would only find the work done. It is a time, not a flag, so that a task the broker
    lost (or a worker that died before starting it) stops holding the slot once the time passes.
    """

    name = models.CharField(max_length=100, primary_key=True)
    queued_until = models.DateTimeField(null=True, blank=True)
    requests = models.BigIntegerField(default=0, help_text="Tasks actually enqueued through this row.")

    class Meta:
        verbose_name = "wake-up request"

    def __str__(self) -> str:
        return f"Wake-up request {self.name}"


# --- a site's own job types (weave.jobs) ----------------------------------------------------------------


class JobState(models.TextChoices):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Cancelled, with the undo of its saved steps asked for: the next attempt runs them, then "cancelled".
    UNDOING = "undoing"


# The states a worker's claim takes a job in: its steps to run, or its saved steps to undo.
RUNNABLE_STATES = (JobState.PENDING, JobState.UNDOING)


def _time_come(clock: Clock) -> Q:
    return Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=clock.now())


class JobQuerySet(LeaseQuerySet[_J]):
    """The states of a job type's rows, each judged by the database clock."""

    def pending(self) -> "JobQuerySet[_J]":
        return self.filter(state=JobState.PENDING)

    def undoing(self) -> "JobQuerySet[_J]":
        """Cancelled rows whose saved steps wait to be undone."""
        return self.filter(state=JobState.UNDOING)

    def runnable(self) -> "JobQuerySet[_J]":
        """Rows a worker has something to do for: pending, or cancelled with their undo asked."""
        return self.filter(state__in=RUNNABLE_STATES)

    def due(self, clock: Clock = default_clock) -> "JobQuerySet[_J]":
        """Pending rows whose time has come and that nobody holds under a live lease (undoing rows: `undo_due`)."""
        # One state, not both: the drain's ordered claim then reads the (state, next_attempt_at) index in
        # order and stops at its limit, where two states would sort every due row first.
        return self.pending().filter(_time_come(clock)).free_or_expired(clock)

    def undo_due(self, clock: Clock = default_clock) -> "JobQuerySet[_J]":
        """Undoing rows whose time has come and that nobody holds under a live lease."""
        return self.undoing().filter(_time_come(clock)).free_or_expired(clock)

    def bulk_create(self, objs: Iterable[_J], *args: Any, **kwargs: Any) -> list[_J]:
        """Django's `bulk_create`, with the rows whose `created_at` is left to its default given the
        database's clock, read once for the call.

        Left to the column's default, every row's DEFAULT is an expression Django resolves and compiles
        row by row, which makes a large batch several times slower (`bench/results/2026-12-06-engine-fifth.md`);
        one read of the same clock gives every row of the call the same database time instead."""
        rows = list(objs)
        unset = [row for row in rows if isinstance(getattr(row, "created_at", None), DatabaseDefault)]
        if unset:
            now = default_clock.read(self._db or router.db_for_write(self.model))
            for row in unset:
                row.created_at = now  # type: ignore[attr-defined]  # every JobModel has it
        return super().bulk_create(rows, *args, **kwargs)

    def next_due_at(self) -> datetime | None:
        """The earliest database time at which a pending row needs a worker (a held row: when its lease ends)."""
        at = Case(
            When(owner__isnull=False, then=F("lease_expires_at")),
            When(next_attempt_at__isnull=False, then=F("next_attempt_at")),
            default=F("created_at"),
        )
        earliest: datetime | None = self.runnable().aggregate(at=Min(at))["at"]
        return earliest


class JobModel(LeasedModel):
    """Abstract base of a site's own fenced job: the lease fields plus what the runner keeps.

    The runner writes these fields only through guarded statements; a site adds its own fields
    (what to book, charge or sync) and never writes `state` by hand.
    """

    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING, editable=False)
    attempts = models.PositiveIntegerField(default=0, editable=False)
    # Bumped by an operator's retry: step receipts and idempotency keys start afresh.
    epoch = models.PositiveIntegerField(default=0, editable=False)
    next_attempt_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, default="", editable=False)
    # The database's clock, as every time of a job's story: a host whose clock is off would otherwise
    # show a job created after its own claim.
    created_at = models.DateTimeField(db_default=DatabaseNow(), editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Database-clock time of the latest claim (null: never claimed, or claimed before Weave wrote it).
    last_attempted_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Who held the job when the latest claim took it over (null: it was free), copied by the claim in
    # its own statement: the takeover records the attempt that lost its lease without a finish.
    previous_owner = models.CharField(  # noqa: DJ001  (None: was free)
        max_length=100, null=True, blank=True, editable=False
    )
    previous_fence = models.BigIntegerField(null=True, blank=True, editable=False)
    previous_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    previous_attempted_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = JobQuerySet.as_manager()  # type: ignore[misc]  # replaces the abstract base's manager

    class Meta:
        abstract = True
        # Unnamed, so each job model gets its own names. The pending rows (the drain, the console's
        # counts) and the oldest finished ones (the retention purge) are index ranges however much
        # finished history the table holds. A subclass that declares its own Meta inherits these
        # with `class Meta(JobModel.Meta)`.
        indexes = [models.Index(fields=["state", "next_attempt_at"]), models.Index(fields=["finished_at"])]


class JobAttemptQuerySet(models.QuerySet["JobAttempt"]):
    def ran(self) -> "JobAttemptQuerySet":
        """The records of attempts that started: without the claims a drain gave back unstarted (`released`)."""
        return self.exclude(outcome=JobAttempt.Outcome.RELEASED)


def attempts_that_ran(records: Iterable["JobAttempt"]) -> list["JobAttempt"]:
    """`records` without the claims given back unstarted: `JobAttempt.objects.ran()` for records already read."""
    return [a for a in records if a.outcome != JobAttempt.Outcome.RELEASED]


class JobAttempt(models.Model):
    """One attempt at one job (of any job type): who ran it, under which fence, and how it ended.

    Also the record of a claim a batch drain gave back before it started the job (`released`): its
    claim took a fence, so the job's story says who held that fence and why it was given back, but it
    is no attempt (the give-back takes back the attempt the claim counted, and the next claim reuses
    its number), so counts of attempts and of troubles leave it out (`JobAttempt.objects.ran()`).
    """

    class Outcome(models.TextChoices):
        DONE = "done"
        RETRY = "retry", "failed, will retry"
        FAILED = "failed"
        BLOCKED = "blocked", "blocked (lease lost)"
        # Stopped without saving: the job was cancelled and its undo asked while the attempt ran.
        CANCELLED = "cancelled", "stopped (job cancelled)"
        # Not an attempt: a claim given back unstarted (the end of a drain's budget, or a hand-on).
        RELEASED = "released", "given back unstarted"

    job_type = models.CharField(max_length=100)
    job_id = models.CharField(max_length=64)
    number = models.PositiveIntegerField()
    owner = models.CharField(max_length=100)
    fence = models.BigIntegerField()
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    reason = models.TextField(blank=True, default="")
    error_class = models.CharField(max_length=300, blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    # A `retry`'s next try: the due time its finish gave the job's row (database time), read back from
    # that finish. Null for every other outcome, and for retries recorded before it was kept.
    retry_at = models.DateTimeField(null=True, blank=True)

    objects = JobAttemptQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["job_type", "job_id", "number"], name="weave_jobattempt_job"),
            # The console's windows (attempts of the last hour, the counters' deltas): a range of this.
            models.Index(fields=["finished_at", "job_type", "outcome"], name="weave_jobattempt_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.job_id} attempt {self.number}: {self.outcome}"


class JobStepReceipt(models.Model):
    """A step that landed: written in the same guarded transaction as the step's own writes.

    A later attempt (after a crash or a lost lease) skips every step with a receipt in the job's
    current epoch and reads back its result: that is how a job resumes.
    """

    job_type = models.CharField(max_length=100)
    job_id = models.CharField(max_length=64)
    epoch = models.PositiveIntegerField()
    step = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField()
    owner = models.CharField(max_length=100)
    fence = models.BigIntegerField()
    idempotency_key = models.CharField(max_length=300)
    result = models.JSONField(null=True, blank=True)
    finished_at = models.DateTimeField()
    # Set (database time, and the undoing attempt's fence) in the guarded transaction of the step's undo.
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_fence = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job_type", "job_id", "epoch", "step"], name="weave_jobstep_once")
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.job_id} step {self.step}"


# --- django.tasks through Weave (weave.tasks) -----------------------------------------------------------


class TaskRow(JobModel):
    """One `django.tasks` task enqueued on `weave.tasks.WeaveBackend`: a fenced job like any other."""

    result_id = models.CharField(max_length=64, unique=True)
    backend = models.CharField(max_length=100)
    queue_name = models.CharField(max_length=100)
    task_path = models.CharField(max_length=300)
    priority = models.IntegerField(default=0)
    takes_context = models.BooleanField(default=False)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    return_value = models.JSONField(null=True, blank=True)
    # The Weave options the task was enqueued with (max_attempts, backoff, retry_on, timeout, lease_ttl).
    options = models.JSONField(default=dict, blank=True)
    # Database-clock time of the first claim (the latest claim's: `last_attempted_at`, from JobModel).
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "task"
        # In the drain's order (queue, highest priority first, then due time, then id): the next due task
        # is the first match of an index walk, not a sort of the whole pending backlog per task.
        indexes = [
            models.Index(fields=["state", "queue_name", "-priority", "next_attempt_at", "id"], name="weave_task_drain"),
            models.Index(fields=["finished_at"], name="weave_task_finished"),
        ]

    def __str__(self) -> str:
        return f"task {self.task_path} ({self.result_id})"


class WorkerReport(models.Model):
    """What one worker process runs with, written by the process itself (`weave.reports`).

    The web process reads its own settings; a worker may run with others (`make run` gives its own
    processes a shorter onboarding TTL, a deploy may set the environment per unit). The dashboard and
    `weave_tune` show these reports, so an operator sees the configuration the work actually runs under.
    """

    name = models.CharField(max_length=200, primary_key=True, help_text="host:pid of the worker process")
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(help_text="database time of the latest report")
    config = models.JSONField(default=dict, help_text="the WEAVE settings this process reads (numbers and flags)")
    link = models.JSONField(
        default=dict,
        help_text="database outages this process saw: how many ended, and the last one (database-clock times)",
    )

    class Meta:
        verbose_name = "worker report"

    def __str__(self) -> str:
        return f"Worker {self.name}"


class PurgeState(models.Model):
    """The retention purge's fence and progress (one row per purge job, `weave.retention`).

    `owner`/`fence`/`lease_expires_at` fence the job: each batch's delete commits only in the same
    transaction as a guarded renewal of this lease, so a purge that lost its lease deletes nothing more.
    """

    name = models.CharField(max_length=100, primary_key=True)
    owner = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001  (None: not held)
    fence = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    deleted = models.BigIntegerField(default=0, help_text="Rows deleted by every purge so far.")
    last_started_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")
    last_finished_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")
    last_outcome = models.TextField(blank=True)

    class Meta:
        verbose_name = "retention purge"

    def __str__(self) -> str:
        return f"Retention purge {self.name}"


class PurgedCount(models.Model):
    """How many rows of one kind (and label, e.g. an attempt's outcome) the purges deleted.

    Metrics counters add these to the rows still stored, so a counter never goes down when history is
    purged.
    """

    kind = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True)
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "label"], name="weave_purged_kind_label")]

    def __str__(self) -> str:
        return f"{self.count} purged {self.kind} {self.label}".strip()


class MetricCheckpoint(models.Model):
    """A named running count's totals up to a database time, shared by every process that serves metrics.

    `weave.metrics.RunningCounts` starts from the newest checkpoint instead of counting every stored
    row, so a process's first scrape costs what a later one does however long the history is.
    """

    name = models.CharField(max_length=100, primary_key=True)
    upto = models.DateTimeField(help_text="Rows that ended at or before this database time are counted.")
    totals = models.JSONField(default=list, help_text="[[labels...], count] pairs.")

    class Meta:
        verbose_name = "metric checkpoint"

    def __str__(self) -> str:
        return f"{self.name} up to {self.upto}"


class WatcherProbe(models.Model):
    """What one worker process's due-time watcher found when it probed its LISTEN connection.

    Written once per (re)connect, so the dashboard and the metrics can say when watchers poll because
    notifications do not reach them (a transaction pooler), instead of that being silent.
    """

    process = models.CharField(max_length=200, primary_key=True, help_text="host:pid")
    mode = models.CharField(max_length=10, help_text='"listen" or "poll"')
    reason = models.TextField(blank=True)
    probed_at = models.DateTimeField(help_text="Database clock.")

    class Meta:
        verbose_name = "watcher probe"

    def __str__(self) -> str:
        return f"Watcher {self.process}: {self.mode}"

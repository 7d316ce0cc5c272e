"""Weave's own rows. The core has no job tables: `WakeRequest` coalesces wake-up requests, and
`Dashboard` is an unmanaged stand-in so the admin lists the Weave dashboard on its index page and
serves it at /admin/weave/dashboard/ (see `weave.dashboard`)."""

from django.db import models


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

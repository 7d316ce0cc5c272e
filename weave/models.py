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

    class Meta:
        verbose_name = "worker report"

    def __str__(self) -> str:
        return f"Worker {self.name}"

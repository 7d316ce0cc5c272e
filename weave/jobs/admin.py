"""`JobAdminMixin`: the start, retry and cancel actions for a core-run job type's admin."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from weave.jobs.services import ActionReport, job_cancel, job_retry, job_start


class JobAdminMixin:
    """Mix into a `ModelAdmin` of a `JobModel` and set `job_type`: the actions call the services and report."""

    job_type: str = ""
    actions = ["start_jobs", "retry_jobs", "cancel_jobs"]

    def _report(self, request: HttpRequest, verb: str, report: ActionReport) -> None:
        user: Any = self
        if report.changed:
            user.message_user(request, f"{verb}: {len(report.changed)} job(s).", messages.SUCCESS)
        if report.busy:
            ids = ", ".join(str(pk) for pk in report.busy)
            user.message_user(request, f"Busy (a worker holds a live lease), left alone: {ids}.", messages.WARNING)
        if report.skipped:
            ids = ", ".join(str(pk) for pk in report.skipped)
            user.message_user(request, f"Not in a state this action applies to: {ids}.", messages.WARNING)

    @admin.action(description="Start now (pending jobs)")
    def start_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        self._report(request, "Started", job_start(job_type=self.job_type, pks=pks))

    @admin.action(description="Retry (failed or cancelled jobs, from their first step)")
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        self._report(request, "Retried", job_retry(job_type=self.job_type, pks=pks))

    @admin.action(description="Cancel (pending jobs nobody holds)")
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        self._report(request, "Cancelled", job_cancel(job_type=self.job_type, pks=pks))

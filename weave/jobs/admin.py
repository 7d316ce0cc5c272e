"""The admin of a core-run job type, from its declaration: `JobAdminMixin`, and the `django.tasks` results' admin.

    @admin.register(Shipment)
    class ShipmentAdmin(JobAdminMixin, admin.ModelAdmin):
        list_display = ("pk", "parcel")  # the job's own columns; the job columns are added after them

Every such admin gets:

- a list with state, attempts, the lease (live or expired, holder, fence), the next attempt and the
  last error, filters by state and lease, narrow enough for a 1280 px screen;
- start, retry, cancel and cancel-and-undo actions that need change permission, each written to the
  job's history;
- deletes that keep a job held under a live lease, naming its holder and the lease's end (database time);
- a change page that opens with the job's story (a plain-language summary and its timeline), then
  the job's own fields, then the job and lease fields, read-only (only workers write them).
"""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from weave.admin import LeasedModelAdmin, LeaseStateFilter, state_filter
from weave.display import clipped, said_once, shown, state_word, timestamp, timestamp_column
from weave.jobs.declaration import JobType, get, job_types, on_register
from weave.jobs.services import ActionReport, job_cancel, job_retry, job_start
from weave.models import RUNNABLE_STATES, JobState, TaskRow

# The job's own columns, and the lease and job fields the mixin shows itself (never as plain fields).
JOB_COLUMNS = ("job_state", "attempts", "lease", "next_attempt", "last_error_line")
# Times as every Weave screen shows them (seconds, zone, database clock), not Django's default format.
JOB_FIELDS = (
    "job_state",
    "attempts",
    "next_attempt",
    "shown_last_error",
    "created_at_display",
    "finished_at_display",
    "epoch",
)
LEASE_FIELDS = ("lease", "owner", "fence", "lease_expires_at_display")
_SHOWN_BY_MIXIN = {
    *JOB_FIELDS,
    *LEASE_FIELDS,
    "created_at",
    "finished_at",
    "lease_expires_at",
    "state",
    "next_attempt_at",
    "last_error",
    "last_error_line",
}


class JobAdminMixin(LeasedModelAdmin):
    """The admin of a `JobModel`: the lease pieces of `LeasedModelAdmin`, and the job columns, filters and actions.

    `job_type` defaults to the job type declared on the admin's model; set it where one model serves two.
    """

    job_type: str = ""
    actions = ["start_jobs", "retry_jobs", "cancel_jobs", "cancel_and_undo_jobs"]
    created_at_display = timestamp_column("created_at", "created at (database clock)")
    finished_at_display = timestamp_column("finished_at", "finished at (database clock)")

    # --- the declaration -------------------------------------------------------------------------------

    def job(self) -> JobType:
        """This admin's job type: `job_type`, else the one declared on its model."""
        if self.job_type:
            return get(self.job_type)
        for job in job_types():
            if job.model is self.model:
                return job
        raise LookupError(f"No job type is declared on {self.model.__name__}; set job_type on its admin.")

    def story_kind(self) -> str:
        try:
            job = self.job()
        except LookupError:  # the model's job type is not registered here: the page without a story
            return ""
        return job.explain_as or job.name

    # --- the list ----------------------------------------------------------------------------------------

    def get_list_display(self, request: HttpRequest) -> Any:
        own = ["job_id" if c == "pk" else c for c in super().get_list_display(request)]  # "pk" is headed "Pk"
        return (*(c for c in own if c not in _SHOWN_BY_MIXIN and c != "lease_state"), *JOB_COLUMNS)

    @admin.display(description="id", ordering="pk")
    def job_id(self, obj: Any) -> Any:
        return obj.pk

    def get_list_filter(self, request: HttpRequest) -> Any:
        own = tuple(super().get_list_filter(request))
        # A type none of whose steps has an undo never reaches `undoing`: no filter offers it.
        states = [s for s in JobState.values if s != JobState.UNDOING or self._undoable()]
        standard = (state_filter("state", states), LeaseStateFilter)
        return (*standard, *(f for f in own if f != "state"))

    def _undoable(self) -> bool:
        try:
            return self.job().undoable
        except LookupError:  # the model's job type is not registered here
            return False

    @admin.display(description="state", ordering="state")
    def job_state(self, obj: Any) -> str:
        return state_word(obj.state)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, obj: Any) -> str:
        if obj.state not in RUNNABLE_STATES:
            return "—"
        if obj.next_attempt_at is None:
            if obj.owner is not None:
                # A lapsed lease is not running: its worker died or stalled, and the next claim takes it over.
                return "running" if self.lease_state(obj) == "live" else "due now (lease expired)"
            return "undo due now" if obj.state == JobState.UNDOING else "due now"
        return timestamp(obj.next_attempt_at)

    @admin.display(description="last error")
    def last_error_line(self, obj: Any) -> str:
        # The first line, cut to the column; the whole of it is in the title and on the job's page.
        return clipped(said_once((obj.last_error or "").split("\n", 1)[0]))

    @admin.display(description="last error")
    def shown_last_error(self, obj: Any) -> str:
        return shown(obj.last_error) or "—"

    # --- the page ----------------------------------------------------------------------------------------

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        own = tuple(super().get_readonly_fields(request, obj))
        return (*own, *(f for f in (*JOB_FIELDS, *LEASE_FIELDS) if f not in own))

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if self.fieldsets:
            own = [(name, opts) for name, opts in self.fieldsets]
        else:
            fields = self.get_fields(request, obj)
            own = [(None, {"fields": [f for f in fields if f not in _SHOWN_BY_MIXIN]})]
        if obj is None:
            return own
        return [
            *own,
            ("Job (written by workers only)", {"fields": JOB_FIELDS}),
            ("Lease (written by workers only)", {"fields": LEASE_FIELDS}),
        ]

    # --- the actions -------------------------------------------------------------------------------------

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        actions = super().get_actions(request, action_location)
        if not self._undoable():
            actions.pop("cancel_and_undo_jobs", None)  # none of its steps has an undo to run
        return actions

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method == "POST" and request.POST.get("action") in self.actions:
            if not self.has_change_permission(request):
                # Django hides the actions from a viewer and drops a posted one without a word: say so.
                message = "Nothing was changed: starting, retrying, cancelling or undoing jobs needs change permission."
                self.message_user(request, message, messages.ERROR)
        return super().changelist_view(request, extra_context)

    def _act(self, request: HttpRequest, verb: str, report: ActionReport) -> None:
        said = (
            f"{verb}: {{count}} job{{s}}.",
            "Busy (a worker holds a live lease), left alone: {ids}.",
            "Not in a state this action applies to: {ids}.",
        )
        history = f"{verb} in the admin."
        self.report_outcomes(request, report, history=history, said=said, changed_level=messages.SUCCESS)

    @admin.action(description="Start now (pending jobs)", permissions=["change"])
    def start_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        self._act(request, "Started", job_start(job_type=self.job().name, pks=pks))

    @admin.action(description="Retry (failed or cancelled jobs, from their first step)", permissions=["change"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        self._act(request, "Retried", job_retry(job_type=self.job().name, pks=pks))

    @admin.action(description="Cancel (pending jobs nobody holds)", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        self._act(request, "Cancelled", job_cancel(job_type=self.job().name, pks=pks))

    @admin.action(
        description="Cancel and undo (pending, failed or cancelled jobs: their saved steps)", permissions=["change"]
    )
    def cancel_and_undo_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        report = job_cancel(job_type=self.job().name, pks=pks, undo=True)
        self._act(request, "Cancelled, undo of the saved steps asked", report)


class TaskAdmin(JobAdminMixin):
    """`django.tasks` tasks enqueued on `weave.tasks.WeaveBackend`: the job admin, with the task's own columns.

    Nothing is added or edited by hand: tasks are enqueued by code, and their arguments are the record of
    what was asked."""

    list_display = ("pk", "task_name", "queue_name", "priority")
    list_filter = ("queue_name",)
    search_fields = ("result_id", "task_path")
    fields = ("result_id", "task_path", "backend", "queue_name", "priority", "args", "kwargs", "return_value")
    readonly_fields = (*fields, "started_at")

    @admin.display(description="task", ordering="task_path")
    def task_name(self, obj: TaskRow) -> str:
        return clipped(obj.task_path.rsplit(".", 1)[-1], one_line=True)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the row is the task's result: its caller may still ask for it


def register_job_admins() -> None:
    """Give every core-run job type declared so far whose model has no admin of its own the job admin.

    Called from `WeaveConfig.ready()`, after the apps' jobs.py: a `@job` type is in the admin with no
    admin.py. The admin modules are found first, so a site's own `ModelAdmin` for the model always wins,
    wherever the admin stands in `INSTALLED_APPS`. A job type registered later (from the `ready()` of an
    app listed after Weave) gets it as it registers (`give_job_admin`).
    """
    admin.autodiscover()
    for declared in job_types():
        give_job_admin(declared)
    on_register(give_job_admin)


def give_job_admin(declared: JobType) -> None:
    """Register the job admin for `declared`'s model when the core runs it and no admin took the model."""
    if not declared.runnable or admin.site.is_registered(declared.model):
        return
    attrs = {"job_type": declared.name, "__module__": declared.model.__module__}
    job_admin = type(f"{declared.model.__name__}Admin", (JobAdminMixin,), attrs)
    admin.site.register(declared.model, job_admin)

"""Admin for suppliers and onboarding runs. Actions call services and report with message_user."""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import ADDITION
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from onboarding.errors import AlreadyOnboarded, RunAlreadyActive, RunNotRetryable
from onboarding.explain import current_reason
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, RunAttempt, StepReceipt, Supplier, VendorRecord
from onboarding.services import (
    RETRY_PERMISSION,
    UNDO_PERMISSION,
    onboarding_cancel,
    onboarding_resume,
    onboarding_retry,
    onboarding_start,
)
from onboarding.steps.plan import DEFAULT_PLAN, PlanError, load_plan
from onboarding.validation import clean_supplier_fields
from weave.operations import (
    ActionRule,
    ActionsWhereTheyApply,
    LeasedModelAdmin,
    LeaseStateFilter,
    OperatorModelAdmin,
    ReadOnlyAdminMixin,
    ReadOnlyTabularInline,
    admin_link,
    admin_link_to,
    changelist_link,
    choice_filter,
    clipped,
    clipped_column,
    how_many,
    joined_reason,
    key_values,
    link_column,
    linked_ids,
    permission_check,
    reason_column,
    record_operator_action,
    said_once,
    shown,
    state_column,
    state_filter,
    table,
    timestamp,
    timestamp_column,
    within_filter,
)

ACTIVE_REFRESH = 2  # seconds between reloads of run pages while a run is pending or running


class LinkedReadOnlyMixin(ReadOnlyAdminMixin):
    """Rows written only by workers (weave.admin.ReadOnlyAdminMixin), linked to their run and supplier."""

    run_link = link_column("run")
    supplier_link = link_column("supplier")


CONFIRM_TEMPLATE = "weave_onboarding/admin/confirm_action.html"


run_links: Callable[[list[Any]], SafeString] = partial(linked_ids, OnboardingRun)


def step_name(path: str) -> str:
    """A plan entry as a person reads it: the step's name, not its dotted module path."""
    return path.rsplit(".", 1)[-1]


def confirm_page(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet, action: str, **context: Any
) -> TemplateResponse:
    """The intermediate page an action shows before doing something that must not happen by a slip."""
    return TemplateResponse(
        request,
        CONFIRM_TEMPLATE,
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.model._meta,
            "queryset": queryset,
            "action": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            **context,
        },
    )


class SupplierForm(forms.ModelForm):
    """The supplier's numbers are checked here, so a malformed one never reaches a run."""

    class Meta:
        model = Supplier
        fields = ["legal_name", "country", "tax_id", "contact_email", "device_token", "iban", "bic"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            cleaned = clean_supplier_fields(
                country=data.get("country", ""),
                tax_id=data.get("tax_id", ""),
                iban=data.get("iban", ""),
                bic=data.get("bic", ""),
            )
        except ValidationError as exc:
            for field, problems in exc.message_dict.items():
                self.add_error(field, problems)
        else:
            data.update(cleaned)  # stored normalized: upper case, no spaces
        return data


def _why_no_start(supplier: Supplier) -> str:
    run = OnboardingRun.objects.active().filter(supplier=supplier).first()
    return f"run {run.pk} is {run.status}: wait for it to finish, or cancel it" if run else "it changed meanwhile"


SUPPLIER_ACTIONS = {
    "start_onboarding": ActionRule(
        label="Start onboarding",
        applies_to="suppliers without a pending or running run",
        rows=lambda qs: qs.exclude(Exists(OnboardingRun.objects.active().filter(supplier=OuterRef("pk")))),
        why_not=_why_no_start,
    ),
}


@admin.register(Supplier)
class SupplierAdmin(ActionsWhereTheyApply, OperatorModelAdmin):
    form = SupplierForm
    readonly_fields = ["onboarding_runs"]

    def get_fields(self, request: HttpRequest, obj: Supplier | None = None) -> Any:
        fields = list(SupplierForm.Meta.fields)
        return [*fields, "onboarding_runs"] if obj is not None else fields

    @admin.display(description="onboarding runs")
    def onboarding_runs(self, supplier: Supplier) -> str:
        runs = list(supplier.onboarding_runs.order_by("-pk")[:20])
        if not runs:
            return "No run yet: use Start onboarding above."
        rows = [
            (
                admin_link(r, f"run #{r.pk}"),
                r.status,
                r.phase or "—",
                timestamp(r.created_at),
                clipped(current_reason(r)),
            )
            for r in runs
        ]
        return table(("run", "status", "last step", "created", "reason"), rows)

    list_display = ["legal_name", "country", "tax_id", "contact_email", "latest_run", "runs"]
    search_fields = ["legal_name", "tax_id", "contact_email"]
    list_filter = ["country"]
    actions = ["start_onboarding"]
    action_rules = SUPPLIER_ACTIONS

    @admin.display(description="latest run")
    def latest_run(self, supplier: Supplier) -> str:
        run = supplier.onboarding_runs.order_by("-pk").first()
        return admin_link(run, f"#{run.pk} {run.status}") if run else "—"

    @admin.display(description="runs")
    def runs(self, supplier: Supplier) -> str:
        return changelist_link(OnboardingRun, "all runs", supplier__id__exact=supplier.pk)

    has_start_onboarding_permission = permission_check("weave_onboarding.start_onboarding")

    @admin.action(description="Start onboarding", permissions=["start_onboarding"])
    def start_onboarding(self, request: HttpRequest, queryset: QuerySet[Supplier]) -> TemplateResponse | None:
        suppliers = list(queryset)
        completed = dict(
            OnboardingRun.objects.filter(supplier__in=suppliers, status=OnboardingRun.Status.COMPLETED)
            .order_by("supplier_id", "pk")
            .values_list("supplier_id", "pk")
        )
        confirmed = request.POST.get("post") == "yes"
        if completed and not confirmed:
            # Re-onboarding sends a second welcome: never without the operator saying so.
            return confirm_page(
                self,
                request,
                queryset,
                "start_onboarding",
                title="Re-onboard suppliers that are already onboarded?",
                intro="Some of the selected suppliers already completed onboarding.",
                warning="A new run for each of these sends the supplier a second welcome notification:",
                warning_items=[f"{s} (completed run {completed[s.pk]})" for s in suppliers if s.pk in completed],
                other="These start as usual:",
                other_items=[str(s) for s in suppliers if s.pk not in completed],
                confirm="Yes, start onboarding again",
            )
        started, skipped, refused = [], [], []
        for supplier in suppliers:
            try:
                run = start_recorded(supplier=supplier, user=request.user, force=confirmed)
            except (RunAlreadyActive, AlreadyOnboarded) as exc:
                skipped.append(str(exc))
            except ValidationError as exc:
                refused.append(f"{supplier}: {'; '.join(exc.messages)}")
            else:
                again = " again" if supplier.pk in completed else ""
                started.append(format_html("{} (run {}{})", supplier, run_links([run.pk]), again))
        self._report_started(request, started, skipped, refused)
        return None

    def _report_started(
        self, request: HttpRequest, started: Sequence[str], skipped: Sequence[str], refused: Sequence[str]
    ) -> None:
        self.say_rows(request, "Started onboarding for {count}: {ids}.", started)
        skipped_text = "Start onboarding applies to suppliers without a pending or running run; skipped {count}: {ids}"
        self.say_rows(request, skipped_text, skipped, joiner=" ", level=messages.WARNING)
        refused_text = "Refused {count} with invalid data (correct the supplier first): {ids}"
        self.say_rows(request, refused_text, refused, joiner=" ", level=messages.ERROR)


def _notification_link(notification_id: Any) -> str:
    # By URL name, not by model: onboarding may use notifications' services only (DESIGN §3).
    return admin_link_to("weave_notifications", "notification", notification_id, f"notification #{notification_id}")


DOMAIN_ROWS: dict[str, type[VendorRecord] | type[PaymentTerms] | type[BankAccount]] = {
    "create_vendor_record": VendorRecord,
    "set_payment_terms": PaymentTerms,
    "register_bank_account": BankAccount,
}


def receipt_output(receipt: StepReceipt) -> str:
    """A receipt's output with the rows it names linked: the welcome notification, the domain rows."""
    output = dict(receipt.output or {})
    links = []
    notification_id = output.pop("notification_id", None)
    if notification_id is not None:
        links.append(("welcome notification", _notification_link(notification_id)))
    model = DOMAIN_ROWS.get(receipt.step)
    if model is not None:
        row = model._default_manager.filter(run_id=receipt.run_id).first()
        if row is not None:
            links.append((str(model._meta.verbose_name), admin_link(row)))
    parts = format_html_join("; ", "{}: {}", links)
    rest = key_values(output, words=True) if output else ""
    return format_html("{}{}", parts, rest) if (links or output) else "—"


class _ReceiptColumns:
    """What a receipt's page and a run's inline list of receipts both show."""

    RECEIPT_FIELDS = ("step", "fence", "owner", "completed_at_display", "linked_output")
    completed_at_display = timestamp_column("completed_at", "completed at (database clock)")

    @admin.display(description="output")
    def linked_output(self, receipt: StepReceipt) -> str:
        return receipt_output(receipt)


class StepReceiptInline(_ReceiptColumns, LinkedReadOnlyMixin, ReadOnlyTabularInline):
    model = StepReceipt
    extra = 0
    fields = readonly_fields = _ReceiptColumns.RECEIPT_FIELDS
    ordering = ["completed_at", "pk"]


class _AttemptColumns:
    """What an attempt's page and a run's inline list of attempts both show."""

    ATTEMPT_FIELDS = ("fence", "owner", "outcome_word", "started_at_display", "ended_at_display", "shown_reason")
    started_at_display = timestamp_column("started_at", "started at (database clock)")
    ended_at_display = timestamp_column("ended_at", "ended at (database clock)")
    shown_reason = reason_column()


class RunAttemptInline(_AttemptColumns, LinkedReadOnlyMixin, ReadOnlyTabularInline):
    model = RunAttempt
    extra = 0
    fields = readonly_fields = _AttemptColumns.ATTEMPT_FIELDS
    ordering = ["fence", "pk"]
    outcome_word = state_column("outcome", "outcome")


def _blocked() -> Exists:
    return Exists(RunAttempt.objects.filter(run=OuterRef("pk"), outcome=RunAttempt.Outcome.BLOCKED))


HasBlockedAttemptsFilter = choice_filter(
    "has blocked attempts", "blocked", {"yes": ("Yes", _blocked), "no": ("No", lambda: ~_blocked())}
)


def _why_no_retry(run: OnboardingRun) -> str:
    if run.status == OnboardingRun.Status.FAILED:
        return "it failed for a reason a retry cannot fix: start a new run instead"
    if run.status in OnboardingRun.ACTIVE:
        return f"{run.status}: it has not failed"
    return f"{run.status}: only a failed run can be retried"


def _why_not_active(verb: str) -> Any:
    return lambda run: f"{run.status}: only a pending or running run can be {verb}"


RUN_ACTIONS = {
    "resume": ActionRule(
        label="Resume",
        applies_to="pending and running runs",
        rows=lambda qs: qs.filter(status__in=OnboardingRun.ACTIVE),
        why_not=_why_not_active("resumed"),
    ),
    "cancel": ActionRule(
        label="Cancel",
        applies_to="pending and running runs",
        rows=lambda qs: qs.filter(status__in=OnboardingRun.ACTIVE),
        why_not=_why_not_active("cancelled"),
    ),
    "retry_failed": ActionRule(
        label="Retry",
        applies_to="failed runs whose cause can be fixed",
        rows=lambda qs: qs.filter(status=OnboardingRun.Status.FAILED, failure_fixable=True),
        why_not=_why_no_retry,
    ),
    "cancel_and_undo": ActionRule(
        label="Cancel and undo",
        applies_to="active and failed runs, and cancelled ones whose undo was not asked yet or failed",
        rows=lambda qs: _undoable(qs),
        why_not=lambda run: _undo_refusal(run),
    ),
}


@admin.register(OnboardingRun)
class OnboardingRunAdmin(ActionsWhereTheyApply, LeasedModelAdmin):
    list_display = [
        "id",
        "supplier_link",
        "status_word",
        "step",
        "list_reason",
        "lease",
        "attempt_count",
        "created_at_display",
    ]
    list_filter = [state_filter("status", OnboardingRun.Status.values), LeaseStateFilter, HasBlockedAttemptsFilter]
    list_select_related = ["supplier"]
    search_fields = ["supplier__legal_name", "owner"]
    # The page is read-only as a whole (has_change_permission): every field is shown, none is edited.
    fields = readonly_fields = (
        "supplier_link",
        "status_word",
        "step",
        "shown_reason",
        "created_by",
        "created_at_display",
        "finished_at_display",
        "owner",
        "fence",
        "lease_expires_at_display",
        "lease_state",
        "failure_fixable",
        "reopened",
        "undo_state",
        "plan_steps",
        "welcome_notification",
        "committed_rows",
    )
    created_at_display = timestamp_column("created_at")
    finished_at_display = timestamp_column("finished_at")
    inlines = [StepReceiptInline, RunAttemptInline]
    actions = ["resume", "cancel", "retry_failed", "cancel_and_undo"]
    action_rules = RUN_ACTIONS
    explain_kind = "run"

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        # The dashboard's "runs by status and step" links filter by step.
        return lookup in {"phase", "failed_step"} or super().lookup_allowed(lookup, value, request)

    status_word = state_column("status", "status", sortable=True)

    @admin.display(description="reason")
    def list_reason(self, run: OnboardingRun) -> str:
        return clipped(current_reason(run))

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        runs: QuerySet = super().get_queryset(request).annotate(attempt_total=Count("attempts", distinct=True))
        return runs

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs start from the supplier admin's "Start onboarding"

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        # A run takes seconds: while it is active the page reloads itself, so its steps appear as they land.
        # (No Save button: nothing on a run is edited by hand, see has_change_permission.)
        # get_object: an id that is no run's (a mistyped URL, a relative link) is None, and the admin says so.
        run = self.get_object(request, unquote(object_id))
        active = run is not None and run.status in OnboardingRun.ACTIVE
        extra = {"weave_refresh": ACTIVE_REFRESH if active else 0}
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **extra})

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        active = OnboardingRun.objects.active().exists()  # the partial unique index keeps this cheap
        extra = {"weave_refresh": ACTIVE_REFRESH if active else 0}
        return super().changelist_view(request, {**(extra_context or {}), **extra})

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A run is the audit trail of its receipts and domain rows, which point at it with PROTECT: no
        # Delete on its page, and no "Delete selected" (a bulk delete of runs could only ever fail).
        return False

    supplier_link = link_column("supplier", ordering="supplier__legal_name")

    @admin.display(description="step")
    def step(self, run: OnboardingRun) -> str:
        """The last saved step; for a failed run, the step it failed at."""
        if run.status == OnboardingRun.Status.FAILED:
            from onboarding.console import failed_step

            return f"failed at {run.failed_step or failed_step(run.phase)}"
        return run.phase or "—"

    @admin.display(description="welcome notification")
    def welcome_notification(self, run: OnboardingRun) -> str:
        receipt = run.receipts.filter(step="send_welcome_notification").first()
        notification_id = (receipt.output or {}).get("notification_id") if receipt else None
        if notification_id is None:
            return "— (not sent yet)" if receipt is None else f"— ({(receipt.output or {}).get('skipped', 'none')})"
        return _notification_link(notification_id)

    def has_change_permission(self, request: HttpRequest, obj: OnboardingRun | None = None) -> bool:
        # A run's page is read-only: a form Save would write the whole row (lease fields and status
        # read moments before) over whatever a worker saved since. Operators use the actions.
        return False if obj is not None else super().has_change_permission(request)

    @admin.display(description="reason")
    def shown_reason(self, run: OnboardingRun) -> str:
        return shown(current_reason(run))

    @admin.display(description="plan")
    def plan_steps(self, run: OnboardingRun) -> str:
        steps = [(path, step_name(path)) for path in (run.plan or DEFAULT_PLAN)]
        return format_html('<ol class="weave-plan">{}</ol>', format_html_join("", '<li title="{}">{}</li>', steps))

    @admin.display(description="committed rows")
    def committed_rows(self, run: OnboardingRun) -> str:
        """What the run's committed steps left in the database, and for a cancelled run what stays."""
        receipts = list(run.receipts.order_by("completed_at", "pk"))
        if not receipts:
            return "No step committed."
        try:
            undoable = {s.name for s in load_plan(run.plan or DEFAULT_PLAN) if s.undoable}
        except PlanError:
            undoable = set()
        rows = [
            (admin_link(row), type(row)._meta.verbose_name)
            for model in (VendorRecord, PaymentTerms, BankAccount)
            for row in model.objects.filter(run=run)
        ]
        items = [(r.step, r.fence, _receipt_state(r, undoable), key_values(r.output, words=True)) for r in receipts]
        table = format_html_join(
            "",
            '<tr><th scope="row">{}</th><td>{}</td><td>{}</td><td>{}</td></tr>',
            items,
        )
        table = format_html(
            '<table class="weave-table"><thead><tr><th scope="col">step</th><th scope="col">fence</th>'
            '<th scope="col">state</th><th scope="col">output</th></tr></thead><tbody>{}</tbody></table>',
            table,
        )
        domain = format_html_join("", "<li>{} ({})</li>", rows) if rows else mark_safe("<li>none</li>")
        note = ""
        if run.status == OnboardingRun.Status.CANCELLED:
            left = [r.step for r in receipts if r.undone_at is None]
            note = format_html(
                "<p><strong>This run was cancelled after {} committed.</strong> Cancelling does not take "
                'back what committed steps wrote; still in place: {}. "Cancel and undo" runs the undo of the '
                "steps that declare one; the others (a sent welcome, a service's own records) stay.</p>",
                how_many(len(receipts), "step{}"),
                ", ".join(left) or "nothing",
            )
        return format_html("{}{}<p>Rows written by this run:</p><ul>{}</ul>", note, table, domain)

    @admin.display(description="attempts", ordering="attempt_total")
    def attempt_count(self, run: OnboardingRun) -> int:
        return getattr(run, "attempt_total", 0)

    @admin.action(description="Resume pending or running runs (enqueue a worker)", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> None:
        def act(run: OnboardingRun) -> str | None:
            return f"Resumed at fence {run.fence}: a worker was enqueued now." if onboarding_resume(run=run) else None

        self._each_run(request, queryset, "resume", act, "Enqueued {count} run{s}: {ids}.")

    @admin.action(description="Cancel pending or running runs", permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> None:
        def act(run: OnboardingRun) -> str | None:
            was = run.status
            done = onboarding_cancel(run=run, cancelled_by=request.user)
            return f"Cancelled (it was {was} at fence {run.fence})." if done else None

        done = "Cancelled {count} run{s}: {ids}. A worker holding one stops at its next save."
        self._each_run(request, queryset, "cancel", act, done)

    def _each_run(
        self, request: HttpRequest, queryset: QuerySet, action: str, act: Callable[[Any], str | None], done: str
    ) -> None:
        """Apply `act` to each selected run (it returns the history entry, or None when the run was left alone)."""
        changed, skipped = [], []
        for run in queryset:
            logged = act(run)
            if logged is None:
                skipped.append(f"#{run.pk} ({run.status})")
            else:
                changed.append(run.pk)
                self.log_change(request, run, logged)
        self.say_rows(request, done, changed, ids=run_links)
        rule = RUN_ACTIONS[action]
        skipped_text = f"{rule.label} applies to {rule.applies_to} only; skipped {{count}}: {{ids}}."
        self.say_rows(request, skipped_text, skipped, level=messages.WARNING)

    has_retry_run_permission = permission_check(RETRY_PERMISSION)
    has_undo_run_permission = permission_check(UNDO_PERMISSION)

    @admin.action(description="Retry failed run (after fixing the cause)", permissions=["retry_run"])
    def retry_failed(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> TemplateResponse | None:
        runs = list(queryset.select_related("supplier"))
        rule = RUN_ACTIONS["retry_failed"]
        applies = set(rule.rows(queryset).values_list("pk", flat=True))
        failed = [r for r in runs if r.pk in applies]
        why = request.POST.get("why", "").strip()
        if request.POST.get("post") != "yes" or not why:
            return self._confirm_retry(request, queryset.filter(pk__in=applies), runs, failed, why)
        done, refused = _retry_runs(request, failed, why)
        reopened = "Re-opened {count} failed run{s}: {ids}. Each resumes after its last receipt."
        self.say_rows(request, reopened, done, ids=run_links)
        skipped = [f"#{r.pk} ({rule.why_not(r)})" for r in runs if r not in failed]
        self.say_rows(request, "Not retried: {ids}", refused, joiner=" ", level=messages.WARNING)
        self.say_rows(request, "{count} not retried: {ids}.", skipped, joiner="; ", level=messages.WARNING)
        return None

    def _confirm_retry(
        self,
        request: HttpRequest,
        applies: QuerySet[OnboardingRun],
        runs: list[OnboardingRun],
        failed: list[OnboardingRun],
        why: str,
    ) -> TemplateResponse:
        rule = RUN_ACTIONS["retry_failed"]
        return confirm_page(
            self,
            request,
            applies,
            "retry_failed",
            title="Retry failed runs?",
            intro="Each failed run is re-opened under a new fence and resumes after its last receipt. "
            "Only a failure someone fixed is worth it (e.g. the supplier's data was corrected).",
            warning="To re-open:",
            warning_items=[
                f"Run {r.pk} for {r.supplier}: "
                + shown(joined_reason(f"failed at {r.failed_step or '—'}", said_once(r.reason)))
                for r in failed
            ],
            other="Left alone:",
            other_items=[f"Run {r.pk} for {r.supplier} ({rule.why_not(r)})" for r in runs if r not in failed],
            ask_why="What was fixed? (It goes into each run's reason, with your name.)",
            why=why,
            confirm="Retry",
        )

    @admin.action(description="Cancel and undo committed steps", permissions=["undo_run"])
    def cancel_and_undo(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> TemplateResponse | None:
        runs = list(queryset.select_related("supplier"))
        applies = {r.pk for r in _undoable(queryset)}
        left = [f"Run {r.pk} for {r.supplier} ({_undo_refusal(r)})" for r in runs if r.pk not in applies]
        if request.POST.get("post") != "yes":
            return confirm_page(
                self,
                request,
                queryset.filter(pk__in=applies),
                "cancel_and_undo",
                title="Cancel and undo?",
                intro="Each run is cancelled (active or failed ones), then a worker runs the undo of every committed "
                "step that declares one, newest first, under its own lease. Steps without an undo stay as they are.",
                warning="To cancel and undo:",
                warning_items=[
                    f"Run {r.pk} for {r.supplier} ({r.status}, last step {r.phase or '—'})"
                    for r in runs
                    if r.pk in applies
                ],
                other="Left alone:",
                other_items=left,
                confirm="Cancel and undo",
            )
        done = []
        for r in runs:
            if r.pk in applies and onboarding_cancel(run=r, cancelled_by=request.user, undo=True):
                done.append(r.pk)
                self.log_change(request, r, f"Cancelled (it was {r.status}); undo of the committed steps requested.")
        self.say_rows(request, "Cancelled run{s} {ids}; the undo of each is queued for a worker.", done, ids=run_links)
        if len(done) < len(runs):
            self.message_user(
                request,
                f"Left alone {len(runs) - len(done)}: " + ("; ".join(left) or "they changed meanwhile") + ".",
                level=messages.WARNING,
            )
        return None


def start_recorded(*, supplier: Supplier, user: Any, force: bool = False) -> OnboardingRun:
    """Start onboarding (`onboarding_start`) and write it to the supplier's and the run's admin history,
    as "Start onboarding" does; `force` is a confirmed re-onboarding. A site's own tool acting for a named
    user calls this too."""
    again = force and supplier.onboarding_runs.filter(status=OnboardingRun.Status.COMPLETED).exists()
    run = onboarding_start(supplier=supplier, started_by=user, force=force)
    record_operator_action(user_id=int(user.pk), obj=supplier, message=f"Started onboarding run {run.pk}.")
    note = " again (re-onboarding confirmed)" if again else ""
    record_operator_action(
        user_id=int(user.pk), obj=run, message=f"Started onboarding{note} for {supplier}.", flag=ADDITION
    )
    return run


def retry_recorded(*, run: OnboardingRun, user: Any, why: str) -> OnboardingRun:
    """Re-open a failed run (`onboarding_retry`) and write the re-open to its admin history, as "Retry" does.

    The history entry names the fence the re-open took, so the run's story accounts for it (the next
    claim takes the one after). A site's own tool retrying for a named user calls this too.
    """
    failed_fence = run.fence
    reopened = onboarding_retry(run=run, retried_by=user, why=why)
    record_operator_action(
        user_id=int(user.pk),
        obj=reopened,
        message=f"Re-opened under fence {reopened.fence} (it failed at fence {failed_fence}): {why}",
    )
    return reopened


def _undoable(runs: QuerySet[OnboardingRun]) -> QuerySet[OnboardingRun]:
    """The runs "Cancel and undo" applies to (the same states `onboarding_cancel(undo=True)` accepts)."""
    Status, Undo = OnboardingRun.Status, OnboardingRun.Undo
    return runs.filter(
        Q(status__in=[*OnboardingRun.ACTIVE, Status.FAILED])
        | Q(status=Status.CANCELLED, undo_state__in=[Undo.NONE, Undo.FAILED])
    )


def _undo_refusal(run: OnboardingRun) -> str:
    if run.status == OnboardingRun.Status.COMPLETED:
        return "completed: nothing to cancel"
    return f"{run.status}, undo {run.undo_state}: already asked"


@admin.register(RunAttempt)
class RunAttemptAdmin(_AttemptColumns, LinkedReadOnlyMixin, OperatorModelAdmin):
    """Every attempt with its outcome and why; blocked ones (lost leases) are a filter away."""

    # "id" first: the row's own link; a first column that is itself a link would nest one link in another.
    list_display = [
        "id",
        "run_link",
        "fence",
        "short_owner",
        "outcome_word",
        "started_at_display",
        "ended_at_display",
        "list_reason",
    ]
    fields = readonly_fields = ("run_link", *_AttemptColumns.ATTEMPT_FIELDS)
    # The bare list shows every attempt; the dashboard links to "blocked".
    list_filter = [
        state_filter("outcome", RunAttempt.Outcome.values, "outcome"),
        within_filter("ended_at", "ended", "ended"),
    ]
    list_select_related = ["run__supplier"]
    search_fields = ["owner", "reason"]
    ordering = ["-pk"]

    list_reason = reason_column(clip=True)
    outcome_word = state_column("outcome", "outcome", sortable=True)
    short_owner = clipped_column("owner", one_line=True)


@admin.register(StepReceipt)
class StepReceiptAdmin(_ReceiptColumns, LinkedReadOnlyMixin, OperatorModelAdmin):
    list_display = ["id", "run_link", *_ReceiptColumns.RECEIPT_FIELDS]
    fields = readonly_fields = ("run_link", *_ReceiptColumns.RECEIPT_FIELDS)
    list_filter = ["step"]
    list_select_related = ["run__supplier"]


@admin.register(VendorRecord)
class VendorRecordAdmin(LinkedReadOnlyMixin, OperatorModelAdmin):
    list_display = ["vendor_number", "supplier_link", "run_link", "fence", "created_at_display"]
    created_at_display = timestamp_column("created_at")


@admin.register(PaymentTerms)
class PaymentTermsAdmin(LinkedReadOnlyMixin, OperatorModelAdmin):
    list_display = ["id", "supplier_link", "net_days", "currency", "run_link", "fence", "created_at_display"]
    created_at_display = timestamp_column("created_at")


@admin.register(BankAccount)
class BankAccountAdmin(LinkedReadOnlyMixin, OperatorModelAdmin):
    list_display = ["id", "supplier_link", "reference", "last4", "run_link", "fence", "verified_at_display"]
    verified_at_display = timestamp_column("verified_at")


def _retry_runs(request: HttpRequest, failed: list[OnboardingRun], why: str) -> tuple[list[int], list[str]]:
    """Re-open each failed run with the operator's note: the ones re-opened, and why the others were not."""
    done, refused = [], []
    for run in failed:
        try:
            retry_recorded(run=run, user=request.user, why=why)
        except (RunNotRetryable, RunAlreadyActive, PermissionDenied) as exc:
            refused.append(str(exc))
        except ValidationError as exc:
            refused.append(f"Run {run.pk}: the supplier's data is still invalid: {'; '.join(exc.messages)}")
        else:
            done.append(run.pk)
    return done, refused


def _receipt_state(receipt: StepReceipt, undoable: set[str]) -> str:
    """Whether a committed step's writes stay, can be undone, or were undone."""
    if receipt.undone_at is not None:
        return f"undone at fence {receipt.undone_fence}, {timestamp(receipt.undone_at)}"
    return "committed; has an undo" if receipt.step in undoable else "committed; no undo (stays)"

"""Admin for suppliers and onboarding runs. Actions call services and report with message_user."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join

from onboarding.errors import AlreadyOnboarded, RunAlreadyActive, RunNotRetryable
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
from weave.admin import LeasedModelAdmin, ReadOnlyAdminMixin

CONFIRM_TEMPLATE = "weave_onboarding/admin/confirm_action.html"


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


@admin.register(Supplier)
class SupplierAdmin(admin.ModelAdmin):
    form = SupplierForm
    list_display = ["legal_name", "country", "tax_id", "contact_email", "latest_run"]
    search_fields = ["legal_name", "tax_id", "contact_email"]
    list_filter = ["country"]
    actions = ["start_onboarding"]

    @admin.display(description="latest run")
    def latest_run(self, supplier: Supplier) -> str:
        run = supplier.onboarding_runs.order_by("-pk").first()
        return f"#{run.pk} {run.status}" if run else "—"

    def has_start_onboarding_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("weave_onboarding.start_onboarding")

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
                run = onboarding_start(supplier=supplier, started_by=request.user, force=confirmed)
            except (RunAlreadyActive, AlreadyOnboarded) as exc:
                skipped.append(str(exc))
            except ValidationError as exc:
                refused.append(f"{supplier}: {'; '.join(exc.messages)}")
            else:
                again = " again" if supplier.pk in completed else ""
                started.append(f"{supplier} (run {run.pk}{again})")
        if started:
            self.message_user(request, f"Started onboarding for {len(started)}: {', '.join(started)}.")
        if skipped:
            self.message_user(
                request,
                f"Skipped {len(skipped)} with an active run: {' '.join(skipped)}",
                level=messages.WARNING,
            )
        if refused:
            self.message_user(
                request,
                f"Refused {len(refused)} with invalid data (correct the supplier first): {' '.join(refused)}",
                level=messages.ERROR,
            )
        return None


class StepReceiptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = StepReceipt
    extra = 0
    fields = readonly_fields = ("step", "fence", "owner", "completed_at", "output")
    ordering = ["completed_at", "pk"]


class RunAttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = RunAttempt
    extra = 0
    fields = readonly_fields = ("fence", "owner", "outcome", "started_at", "ended_at", "reason")
    ordering = ["fence", "pk"]


class HasBlockedAttemptsFilter(admin.SimpleListFilter):
    title = "has blocked attempts"
    parameter_name = "blocked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        blocked = RunAttempt.objects.filter(run=OuterRef("pk"), outcome=RunAttempt.Outcome.BLOCKED)
        if self.value() == "yes":
            return queryset.filter(Exists(blocked))
        if self.value() == "no":
            return queryset.exclude(Exists(blocked))
        return queryset


@admin.register(OnboardingRun)
class OnboardingRunAdmin(LeasedModelAdmin):
    list_display = ["id", "supplier", "status", "phase", "owner", "fence", "lease_state", "attempt_count", "created_at"]
    list_filter = ["status", HasBlockedAttemptsFilter]
    list_select_related = ["supplier"]
    search_fields = ["supplier__legal_name", "owner"]
    readonly_fields = [
        "supplier",
        "status",
        "phase",
        "reason",
        "created_by",
        "created_at",
        "finished_at",
        "owner",
        "fence",
        "lease_expires_at",
        "lease_state",
        "failed_step",
        "failure_fixable",
        "reopened",
        "undo_state",
        "plan_steps",
        "committed_rows",
        "timeline",
    ]
    inlines = [StepReceiptInline, RunAttemptInline]
    actions = ["resume", "cancel", "retry_failed", "cancel_and_undo"]
    explain_kind = "run"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        runs: QuerySet = super().get_queryset(request).annotate(attempt_total=Count("attempts", distinct=True))
        return runs

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs start from the supplier admin's "Start onboarding"

    @admin.display(description="plan")
    def plan_steps(self, run: OnboardingRun) -> str:
        return format_html_join(", ", "<code>{}</code>", ((path,) for path in (run.plan or DEFAULT_PLAN)))

    @admin.display(description="committed rows")
    def committed_rows(self, run: OnboardingRun) -> str:
        """What the run's committed steps left in the database, and for a cancelled run what stays."""
        receipts = list(run.receipts.order_by("completed_at", "pk"))
        if not receipts:
            return "No step committed."
        try:
            undoable = {s.name for s in load_plan(run.plan or DEFAULT_PLAN) if s.undo is not None}
        except PlanError:
            undoable = set()
        rows = [
            (str(row), type(row)._meta.verbose_name)
            for model in (VendorRecord, PaymentTerms, BankAccount)
            for row in model.objects.filter(run=run)
        ]
        items = []
        for r in receipts:
            if r.undone_at is not None:
                state = f"undone at fence {r.undone_fence}, {r.undone_at:%Y-%m-%d %H:%M:%S %Z}"
            elif r.step in undoable:
                state = "committed; has an undo"
            else:
                state = "committed; no undo (stays)"
            items.append((r.step, r.fence, state, r.output))
        table = format_html_join("", "<li><code>{}</code> at fence {}: {} <small>{}</small></li>", items)
        domain = format_html_join("", "<li>{} ({})</li>", rows) if rows else format_html("<li>none</li>")
        note = ""
        if run.status == OnboardingRun.Status.CANCELLED:
            left = [r.step for r in receipts if r.undone_at is None]
            note = format_html(
                "<p><strong>This run was cancelled after {} step(s) committed.</strong> Cancelling does not take "
                'back what committed steps wrote; still in place: {}. "Cancel and undo" runs the undo of the '
                "steps that declare one; the others (a sent welcome, a service's own records) stay.</p>",
                len(receipts),
                ", ".join(left) or "nothing",
            )
        return format_html("{}<ul>{}</ul><p>Rows written by this run:</p><ul>{}</ul>", note, table, domain)

    @admin.display(description="attempts", ordering="attempt_total")
    def attempt_count(self, run: OnboardingRun) -> int:
        return getattr(run, "attempt_total", 0)

    @admin.action(description="Resume (enqueue a worker)", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> None:
        resumed = [run.pk for run in queryset if onboarding_resume(run=run)]
        skipped = queryset.count() - len(resumed)
        if resumed:
            self.message_user(request, f"Enqueued {len(resumed)} run(s): {', '.join(map(str, resumed))}.")
        if skipped:
            self.message_user(request, f"Skipped {skipped} finished run(s).", level=messages.WARNING)

    @admin.action(description="Cancel", permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> None:
        cancelled = [run.pk for run in queryset if onboarding_cancel(run=run, cancelled_by=request.user)]
        skipped = queryset.count() - len(cancelled)
        if cancelled:
            self.message_user(
                request,
                f"Cancelled {len(cancelled)} run(s): {', '.join(map(str, cancelled))}. "
                "A worker holding one stops at its next save.",
            )
        if skipped:
            self.message_user(request, f"Skipped {skipped} finished run(s).", level=messages.WARNING)

    def has_retry_run_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RETRY_PERMISSION)

    def has_undo_run_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(UNDO_PERMISSION)

    @admin.action(description="Retry failed run (after fixing the cause)", permissions=["retry_run"])
    def retry_failed(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> TemplateResponse | None:
        runs = list(queryset.select_related("supplier"))
        failed = [r for r in runs if r.status == OnboardingRun.Status.FAILED]
        why = request.POST.get("why", "").strip()
        if request.POST.get("post") != "yes" or not why:
            return confirm_page(
                self,
                request,
                queryset,
                "retry_failed",
                title="Retry failed runs?",
                intro="Each failed run is re-opened under a new fence and resumes after its last receipt. "
                "Only a failure someone fixed is worth it (e.g. the supplier's data was corrected).",
                warning="Re-opened:",
                warning_items=[
                    f"Run {r.pk} for {r.supplier}: failed at {r.failed_step or '-'}: {r.reason}" for r in failed
                ],
                other="Left alone (retry applies to failed runs only):",
                other_items=[f"Run {r.pk} for {r.supplier} ({r.status})" for r in runs if r not in failed],
                ask_why="What was fixed? (It goes into each run's reason, with your name.)",
                why=why,
                confirm="Retry",
            )
        done, refused = [], []
        for run in failed:
            try:
                onboarding_retry(run=run, retried_by=request.user, why=why)
            except (RunNotRetryable, RunAlreadyActive, PermissionDenied) as exc:
                refused.append(str(exc))
            except ValidationError as exc:
                refused.append(f"Run {run.pk}: the supplier's data is still invalid: {'; '.join(exc.messages)}")
            else:
                done.append(str(run.pk))
                self.log_change(request, run, f"Retried: {why}")
        if done:
            self.message_user(
                request, f"Re-opened {len(done)} failed run(s): {', '.join(done)}. Each resumes after its last receipt."
            )
        skipped = len(runs) - len(failed)
        if refused or skipped:
            extra = f" {skipped} not failed (retry applies to failed runs only)." if skipped else ""
            self.message_user(request, f"Not retried: {' '.join(refused)}{extra}".strip(), level=messages.WARNING)
        return None

    @admin.action(description="Cancel and undo committed steps", permissions=["undo_run"])
    def cancel_and_undo(self, request: HttpRequest, queryset: QuerySet[OnboardingRun]) -> TemplateResponse | None:
        runs = list(queryset.select_related("supplier"))
        if request.POST.get("post") != "yes":
            return confirm_page(
                self,
                request,
                queryset,
                "cancel_and_undo",
                title="Cancel and undo?",
                intro="Each run is cancelled (active or failed ones), then a worker runs the undo of every committed "
                "step that declares one, newest first, under its own lease. Steps without an undo stay as they are.",
                warning="Runs:",
                warning_items=[f"Run {r.pk} for {r.supplier} ({r.status}, last step {r.phase or '-'})" for r in runs],
                confirm="Cancel and undo",
            )
        done = [str(r.pk) for r in runs if onboarding_cancel(run=r, cancelled_by=request.user, undo=True)]
        if done:
            self.message_user(request, f"Cancelled run(s) {', '.join(done)}; their undo is queued for a worker.")
        if len(done) < len(runs):
            self.message_user(
                request,
                f"Skipped {len(runs) - len(done)}: completed runs, or cancelled ones whose undo was already asked.",
                level=messages.WARNING,
            )
        return None


class RunAttemptOutcomeFilter(admin.SimpleListFilter):
    """A run attempt's own outcome, opening on "blocked": the attempts that lost their lease, with their reasons."""

    title = "outcome"
    parameter_name = "outcome"
    default = RunAttempt.Outcome.BLOCKED.value

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*RunAttempt.Outcome.choices, ("all", "All outcomes")]

    def value(self) -> str:
        return super().value() or self.default

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset if value == "all" else queryset.filter(outcome=value)

    def choices(self, changelist: Any) -> Any:
        # No "All" entry pointing at the bare URL: the bare URL means "blocked" here.
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == str(lookup),
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }


@admin.register(RunAttempt)
class RunAttemptAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Blocked attempts and why (the page opens on them); other outcomes are a filter away."""

    list_display = ["run", "fence", "owner", "outcome", "started_at", "ended_at", "reason"]
    list_filter = [RunAttemptOutcomeFilter]
    list_select_related = ["run__supplier"]
    search_fields = ["owner", "reason"]
    ordering = ["-pk"]


@admin.register(StepReceipt)
class StepReceiptAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["run", "step", "fence", "owner", "completed_at"]
    list_filter = ["step"]
    list_select_related = ["run__supplier"]


@admin.register(VendorRecord)
class VendorRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["vendor_number", "supplier", "run", "fence", "created_at"]


@admin.register(PaymentTerms)
class PaymentTermsAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["supplier", "net_days", "currency", "run", "fence"]


@admin.register(BankAccount)
class BankAccountAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["supplier", "reference", "last4", "run", "fence", "verified_at"]

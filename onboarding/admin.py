"""Admin for suppliers and onboarding runs. Actions call services and report with message_user."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.http import HttpRequest

from onboarding.errors import RunAlreadyActive
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, RunAttempt, StepReceipt, Supplier, VendorRecord
from onboarding.services import onboarding_cancel, onboarding_resume, onboarding_start
from weave.admin import LeasedModelAdmin, ReadOnlyAdminMixin


@admin.register(Supplier)
class SupplierAdmin(admin.ModelAdmin):
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
    def start_onboarding(self, request: HttpRequest, queryset: QuerySet[Supplier]) -> None:
        started, skipped = [], []
        for supplier in queryset:
            try:
                run = onboarding_start(supplier=supplier, started_by=request.user)
            except RunAlreadyActive as exc:
                skipped.append(str(exc))
            else:
                started.append(f"{supplier} (run {run.pk})")
        if started:
            self.message_user(request, f"Started onboarding for {len(started)}: {', '.join(started)}.")
        if skipped:
            self.message_user(
                request,
                f"Skipped {len(skipped)} with an active run: {' '.join(skipped)}",
                level=messages.WARNING,
            )


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
        "timeline",
    ]
    inlines = [StepReceiptInline, RunAttemptInline]
    actions = ["resume", "cancel"]
    explain_kind = "run"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        runs: QuerySet = super().get_queryset(request).annotate(attempt_total=Count("attempts", distinct=True))
        return runs

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs start from the supplier admin's "Start onboarding"

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

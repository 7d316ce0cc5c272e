"""Admin pieces every Weave app shares: rows only workers write, lease state by the database clock, timelines.

The core registers no model admin of its own; the apps build theirs from these.
"""

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from weave.explain import explainers
from weave.leases import LeaseQuerySet, default_clock
from weave.telemetry import db_now

CONSOLE_CSS = "weave/console.css"
CONSOLE_JS = "weave/console.js"


class ConsoleMedia:
    """The Weave lists' stylesheet and the reload script (reason columns, the phone layout)."""

    css = {"all": [CONSOLE_CSS]}
    js = [CONSOLE_JS]


class OperatorLogMixin:
    """History entries (LogEntry) stamped by the database clock, so a job's timeline orders them truly
    against claims and attempts, which the database stamps too. The timelines read them as operator events."""

    empty_value_display = "—"  # one dash on every Weave screen

    def _log_entry(self, request: HttpRequest, obj: Model, flag: int, message: Any) -> LogEntry:
        if isinstance(message, list):
            import json

            message = json.dumps(message)
        return LogEntry.objects.create(
            action_time=db_now(),
            user_id=int(request.user.pk or 0),
            content_type=ContentType.objects.get_for_model(obj, for_concrete_model=False),
            object_id=str(obj.pk),
            object_repr=str(obj)[:200],
            action_flag=flag,
            change_message=message or "",
        )

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return self._log_entry(request, obj, CHANGE, message)

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return self._log_entry(request, obj, ADDITION, message)


class LeaseStateFilter(admin.SimpleListFilter):
    """Rows by lease: held under a live lease, held under an expired one, or free (by the database clock)."""

    title = "lease"
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "live"), ("expired", "expired"), ("free", "free")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        now = default_clock.now()
        if self.value() == "live":
            return queryset.filter(owner__isnull=False, lease_expires_at__gt=now)
        if self.value() == "expired":
            return queryset.filter(owner__isnull=False, lease_expires_at__lte=now)
        if self.value() == "free":
            return queryset.filter(owner__isnull=True)
        return queryset


def state_filter(field: str, values: list[str], parameter: str | None = None) -> type[admin.SimpleListFilter]:
    """A list filter on a state column that names each state as every Weave screen does ("lease lost")."""
    from weave.display import state_word

    class StateFilter(admin.SimpleListFilter):
        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return [(value, state_word(value)) for value in values]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            return queryset.filter(**{field: self.value()}) if self.value() else queryset

    StateFilter.title = field
    StateFilter.parameter_name = parameter or f"{field}__exact"
    StateFilter.__name__ = f"{field.capitalize()}StateFilter"
    return StateFilter


WINDOWS = {"15m": ("last 15 minutes", timedelta(minutes=15)), "1h": ("last hour", timedelta(hours=1))}
WINDOWS["24h"] = ("last 24 hours", timedelta(hours=24))


def within_filter(field: str, parameter: str, title: str) -> type[admin.SimpleListFilter]:
    """A list filter "`field` within the last 15 minutes / hour / 24 hours", by the database clock."""

    class WithinFilter(admin.SimpleListFilter):
        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return [(key, label) for key, (label, _) in WINDOWS.items()]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            window = WINDOWS.get(self.value() or "")
            if window is None:
                return queryset
            return queryset.filter(Q(**{f"{field}__gt": db_now() - window[1]}))

    WithinFilter.title = title
    WithinFilter.parameter_name = parameter
    WithinFilter.__name__ = f"{parameter.capitalize()}WithinFilter"
    return WithinFilter


class ReadOnlyAdminMixin:
    """Rows written only by workers (receipts, attempts, domain writes): visible, never edited by hand."""

    empty_value_display = "—"  # one dash on every Weave screen

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LeasedModelAdmin(OperatorLogMixin, admin.ModelAdmin):
    """Admin of a leased job: a `lease_state` column judged by the database clock and a `timeline` field.

    Set `explain_kind` to the kind the app registered with `weave.explain.register_explainer`. The lease
    fields themselves stay read-only: only `weave.leases` writes them.
    """

    explain_kind = ""
    Media = ConsoleMedia

    @admin.display(description="lease")
    def lease(self, obj: Model) -> str:
        """Lease state, holder and fence in one list column: "live · worker-a · fence 3"."""
        from weave.display import clipped

        state = self.lease_state(obj)
        fence = getattr(obj, "fence", 0)
        if state == "free":
            return f"free · fence {fence}"
        return format_html("{} · {} · fence {}", state, clipped(getattr(obj, "owner", "") or "", one_line=True), fence)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        assert isinstance(queryset, LeaseQuerySet), f"{self.model.__name__} is not a leased model"
        # "Live" is judged by the database clock in the same query, never by this web server's clock.
        return queryset.with_lease_state()

    @admin.display(description="lease")
    def lease_state(self, obj: Model) -> str:
        if getattr(obj, "owner", None) is None:
            return "free"
        live = getattr(obj, "lease_live", None)
        if live is None:  # not loaded through get_queryset(): ask the database clock now
            row = self.model._default_manager.filter(pk=obj.pk)
            live = isinstance(row, LeaseQuerySet) and row.live().exists()
        return "live" if live else "expired"

    @admin.display(description="timeline")
    def timeline(self, obj: Model) -> str:
        return explainers()[self.explain_kind](obj.pk).as_html()

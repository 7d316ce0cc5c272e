"""Admin pieces every Weave app shares: rows only workers write, lease state by the database clock, timelines.

The core registers no model admin of its own; the apps build theirs from these.
"""

from typing import Any

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from weave.explain import explainers
from weave.leases import LeaseQuerySet


class ReadOnlyAdminMixin:
    """Rows written only by workers (receipts, attempts, domain writes): visible, never edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LeasedModelAdmin(admin.ModelAdmin):
    """Admin of a leased job: a `lease_state` column judged by the database clock and a `timeline` field.

    Set `explain_kind` to the kind the app registered with `weave.explain.register_explainer`. The lease
    fields themselves stay read-only: only `weave.leases` writes them.
    """

    explain_kind = ""

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

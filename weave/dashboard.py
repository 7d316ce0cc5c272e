"""The Weave dashboard: one admin page (/admin/weave/dashboard/, staff only) that answers "is it
healthy, what is stuck and why, and is my lease TTL right".

It lives in the core and draws the core's own panels (leases per job type, the lease TTL advice);
the apps add theirs through `weave.telemetry.register_panel` in `AppConfig.ready()`, so the core
never imports an app. The admin index links to it through the unmanaged `weave.models.Dashboard`.
"""

import threading
import time
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.cache import never_cache

from weave.charts import stats, table, when
from weave.conf import weave_settings
from weave.models import Dashboard
from weave.telemetry import TtlReport, db_now, lease_counts, panels, register_panel, ttl_reports

# The TTL advice reads up to TUNE_LIMIT samples per job type: fine once a minute, wasteful every refresh.
TTL_CACHE_SECONDS = 60.0
_ttl_cache: dict[str, Any] = {}
_ttl_lock = threading.Lock()


def cached_ttl_reports() -> list[TtlReport]:
    with _ttl_lock:
        if _ttl_cache.get("until", 0.0) > time.monotonic():
            return list(_ttl_cache["reports"])
        reports = ttl_reports()
        _ttl_cache.update(reports=reports, until=time.monotonic() + TTL_CACHE_SECONDS)
        return list(reports)


def clear_ttl_cache() -> None:
    with _ttl_lock:
        _ttl_cache.clear()


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def render_leases(now: datetime) -> SafeString:
    counts = lease_counts()
    rows = [(job, c["live"], c["expired"]) for job, c in counts.items()]
    expired = sum(c["expired"] for c in counts.values())
    note = (
        format_html(
            '<p class="weave-warn">{} expired lease(s): their workers died or stalled; the sweep hands them '
            "to a new worker under a new fence.</p>",
            expired,
        )
        if expired
        else ""
    )
    return format_html(
        "{}{}<p>Live or expired is judged by the database clock in the same query ({}).</p>",
        table(["job type", "live leases", "expired leases"], rows, empty="No leased job type registered."),
        note,
        when(now),
    )


def render_ttl(now: datetime) -> SafeString:
    reports = cached_ttl_reports()
    rows = []
    for r in reports:
        a = r.advice
        verdict = "not enough data" if not a.enough_data else ("TOO SHORT" if a.too_short else "ok")
        rows.append(
            (
                r.job,
                f"{r.group_kind} {r.group}",
                a.samples,
                _seconds(a.p50),
                _seconds(a.p95),
                _seconds(a.p99),
                "—" if a.needed is None else f"{a.needed:.0f} s",
                f"{r.setting} = {a.configured:g} s",
                verdict,
            )
        )
    interval = weave_settings.HEARTBEAT_INTERVAL
    return format_html(
        "{}<p>Needed TTL = p99 latency (capped at the request timeout) + heartbeat interval "
        "({}) + margin (max(1 s, 20% of p99)), from the newest samples of the last 24 hours; "
        "<code>manage.py weave_tune</code> prints the same with the data behind it.</p>",
        table(
            ["job", "group", "samples", "p50", "p95", "p99", "needed TTL", "configured", "verdict"],
            rows,
            empty="No latency recorded in the last 24 hours.",
        ),
        "ttl/3" if interval is None else f"{interval:g} s",
    )


register_panel_defaults = [
    ("leases", "Leases by job type", 5, render_leases),
    ("ttl", "Lease TTL: configured and needed", 90, render_ttl),
]


def register_core_panels() -> None:
    from weave.telemetry import Panel

    for key, title, order, render in register_panel_defaults:
        register_panel(Panel(key=key, title=title, order=order, render=render))


@never_cache
def dashboard_view(request: HttpRequest, admin_site: admin.AdminSite) -> HttpResponse:
    now = db_now()
    sections = [(p.key, p.title, p.render(now)) for p in panels()]
    refresh = int(request.GET.get("refresh", weave_settings.DASHBOARD_REFRESH) or 0)
    context = {
        **admin_site.each_context(request),
        "title": "Weave dashboard",
        "sections": sections,
        "now": when(now),
        "refresh": max(0, refresh),
        "headline": stats([("database time", when(now))]),
    }
    return TemplateResponse(request, "admin/weave/dashboard.html", context)


class DashboardAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Serves the dashboard at the model's changelist URL; nothing to add, change or delete."""

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(lambda request: dashboard_view(request, self.admin_site))
        return [path("", view, name="weave_dashboard_changelist")]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def register_admin() -> None:
    """Put the dashboard on the default admin site (called from WeaveConfig.ready())."""
    if not admin.site.is_registered(Dashboard):
        admin.site.register(Dashboard, DashboardAdmin)

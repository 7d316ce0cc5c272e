"""The Weave dashboard: one admin page (/admin/weave/dashboard/, staff only) that answers "is it
healthy, what is stuck and why, and is my lease TTL right".

It lives in the core and draws the core's own panels (leases per job type, the lease TTL advice);
the apps add theirs through `weave.telemetry.register_panel` in `AppConfig.ready()`, so the core
never imports an app. The admin index links to it through the unmanaged `weave.models.Dashboard`.
"""

import threading
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.cache import never_cache

from weave.charts import age, table, when
from weave.conf import weave_settings
from weave.display import change_link, changelist_url, linked
from weave.models import Dashboard
from weave.reports import REPORT_EVERY
from weave.telemetry import (
    DEGRADED,
    FAILING,
    TUNE_LIMIT,
    Finding,
    Panel,
    TtlReport,
    Workers,
    db_now,
    health_checks,
    lease_counts,
    lease_jobs,
    panels,
    register_health,
    register_panel,
    ttl_reports,
    workers,
)
from weave.tuning import MARGIN_FLOOR, MARGIN_SHARE, MIN_SAMPLES

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


EXPIRED_LISTED = 10  # expired leases named one by one per job type; the count links to all of them
FAILING_AFTER = 120.0  # seconds an expired lease may stay untaken before the verdict is "failing"


def expired_leases(now: datetime, limit: int = EXPIRED_LISTED) -> list[tuple[str, Any]]:
    """(job type, row) for the leases that ran out, oldest expiry first, judged by the database clock."""
    found = []
    for job, model in lease_jobs().items():
        rows = model._default_manager.filter(owner__isnull=False, lease_expires_at__lte=now)
        found += [(job, row) for row in rows.order_by("lease_expires_at", "pk")[:limit]]
    return found


def _lease_name(job: str, row: Any) -> SafeString:
    return change_link(type(row), row.pk, f"{job} #{row.pk}")


def lease_findings(now: datetime) -> list[Finding]:
    """An expired lease is a worker that died or froze holding a job: say which, and for how long.

    One worker's batch (many rows, one owner) is one reason naming each row, not one reason per row.
    """
    by_holder: dict[tuple[str, str], list[Any]] = {}
    for job, row in expired_leases(now):
        by_holder.setdefault((job, row.owner), []).append(row)
    findings = []
    for (job, owner), rows in by_holder.items():
        first = rows[0]  # the oldest expiry
        ago = (now - first.lease_expires_at).total_seconds()
        names = mark_safe(", ".join(_lease_name(job, r) for r in rows))  # each built by format_html
        fences = sorted({r.fence for r in rows})
        fence_text = f"fence {fences[0]}" if len(fences) == 1 else f"fences {fences[0]}–{fences[-1]}"
        nxt = (
            f"the next claim takes it over under fence {first.fence + 1}"
            if len(rows) == 1
            else ("the next claims take them over, each under its next fence")
        )
        findings.append(
            Finding.said(
                FAILING if ago > FAILING_AFTER else DEGRADED,
                "Expired lease{}: {} held by {} at {}, expired {} ago; its worker died or stalled, and {}.",
                "" if len(rows) == 1 else "s",
                names,
                owner,
                fence_text,
                age(ago),
                nxt,
            )
        )
    return findings


def worker_findings(now: datetime) -> list[Finding]:
    crew = workers(now)
    if crew.any_reported and not crew.live:
        last = max(w.seen_at for w in crew.stale)
        return [
            Finding.said(
                FAILING,
                "No live worker: the last worker report came {} ago (database clock).",
                age((now - last).total_seconds()),
            )
        ]
    return []


def verdict(now: datetime) -> tuple[str, list[Finding]]:
    """ "healthy", "degraded" or "failing", and the findings behind it (failing ones first)."""
    findings = [*worker_findings(now), *lease_findings(now)]
    for check in health_checks():
        findings += check(now)
    findings.sort(key=lambda f: f.level != FAILING)
    if any(f.level == FAILING for f in findings):
        return FAILING, findings
    return (DEGRADED, findings) if findings else ("healthy", findings)


def render_verdict(now: datetime) -> SafeString:
    state, findings = verdict(now)
    if not findings:
        return format_html(
            '<div id="weave-verdict" class="weave-verdict healthy"><p><strong>Healthy.</strong> No expired lease, '
            "no waiting backlog, no recent failure ({}).</p></div>",
            when(now),
        )
    items = format_html_join(
        "",
        '<li class="{}"><span class="weave-level">{}:</span> {}</li>',
        ((f.level, f.level, f.text) for f in findings),
    )
    count = len(findings)
    return format_html(
        '<div id="weave-verdict" class="weave-verdict {}"><p><strong>{}</strong>: {} reason{} ({}).</p>'
        "<ul>{}</ul></div>",
        state,
        state.capitalize(),
        count,
        "" if count == 1 else "s",
        when(now),
        items,
    )


def render_leases(now: datetime) -> SafeString:
    counts = lease_counts()
    rows = []
    for job, c in counts.items():
        model = lease_jobs()[job]
        rows.append(
            (
                job,
                _count_link(model, c["live"], lease="live"),
                _count_link(model, c["expired"], lease="expired"),
            )
        )
    expired = expired_leases(now)
    named = table(
        ["job", "held by", "fence", "expired", "next"],
        [
            (
                _lease_name(job, row),
                row.owner,
                row.fence,
                f"{age((now - row.lease_expires_at).total_seconds())} ago",
                f"the next claim takes it under fence {row.fence + 1}",
            )
            for job, row in expired
        ],
        empty="No expired lease.",
    )
    return format_html(
        "{}<h3>Expired leases</h3>{}<p>Live or expired is judged by the database clock in the same query ({}).</p>",
        table(["job type", "live leases", "expired leases"], rows, empty="No leased job type registered."),
        named,
        when(now),
    )


def _count_link(model: Any, n: int, **filters: object) -> SafeString:
    return linked(n, changelist_url(model, **filters) if n else None)


def render_workers(now: datetime) -> SafeString:
    """The worker processes' own reports: alive or not, and the settings they run with."""
    crew = workers(now)
    if not crew.any_reported:
        return format_html(
            "<p>No worker has reported yet. Each <code>qcluster</code> worker process reports every {} s what it "
            "runs with; the figures on this page that depend on configuration then show the workers' values.</p>",
            f"{REPORT_EVERY:g}",
        )
    keys = [k for k in SHOWN_KEYS if any(k in w.config for w in crew.live)]
    rows = []
    for key in keys:
        values = crew.values(key)
        mine = getattr(weave_settings, key)
        differs = values != [mine]
        rows.append(
            (
                key,
                ", ".join(_value(v) for v in values) or "—",
                format_html('<span class="weave-warn">{}</span>', _value(mine)) if differs else _value(mine),
            )
        )
    listed = table(
        ["worker", "started", "last report", "state"],
        [
            (w.name, when(w.started_at), f"{age((now - w.seen_at).total_seconds())} ago", state)
            for state, group in (("live", crew.live), ("gone (no report for 45 s)", crew.stale))
            for w in group
        ],
    )
    return format_html(
        "{}<h3>Configuration as the live workers run it</h3>{}<p>Where the web process reads another value (in red), "
        "the workers' value is what the jobs run under.</p>",
        listed,
        table(["setting", "workers run with", "this web process reads"], rows, empty="No live worker."),
    )


# The settings an operator compares with what they see: lease TTLs, heartbeat, timeouts, batches.
SHOWN_KEYS = (
    "LEASE_TTL",
    "PUSH_LEASE_TTL",
    "ONBOARDING_LEASE_TTL",
    "HEARTBEAT_INTERVAL",
    "PUSH_TIMEOUT",
    "SUPPLIER_API_TIMEOUT",
    "PUSH_BATCH_SIZE",
    "PUSH_CONCURRENCY",
    "PUSH_HTTP2_CONCURRENCY",
    "PUSH_MAX_ATTEMPTS",
    "PUSH_BREAKER_THRESHOLD",
    "PUSH_BREAKER_COOLDOWN",
    "ONBOARDING_BUDGET",
)


def _value(value: Any) -> str:
    if value is None:
        return "not set"
    return f"{value:g}" if isinstance(value, float) else str(value)


LONG_TTL_FACTOR = 3.0  # a TTL this many times the need (and 10 s above it) delays takeover for nothing
LONG_TTL_SLACK = 10.0


def ttl_as_run(report: TtlReport, crew: Workers) -> tuple[TtlReport, str]:
    """The report with the TTL the live workers run with (when they report one), and where it came from."""
    values = [float(v) for v in crew.values(report.setting) if isinstance(v, int | float)]
    if not values:
        return report, "this web process"
    configured = max(values)  # several values: the longest one decides how late a takeover comes
    return replace(report, advice=replace(report.advice, configured=configured)), "workers"


def ttl_verdict(a: Any) -> str:
    if not a.enough_data:
        return f"not enough data ({a.samples} of {MIN_SAMPLES} samples)"
    if a.too_short:
        return f"TOO SHORT: raise to at least {a.needed:.0f} s"
    if a.configured >= LONG_TTL_FACTOR * a.needed and a.configured - a.needed >= LONG_TTL_SLACK:
        return f"long: a crashed worker's job is taken over only after {a.configured:g} s (needs {a.needed:.0f} s)"
    return "ok"


def ttl_findings(now: datetime) -> list[Finding]:
    crew = workers(now)
    found = []
    for report in cached_ttl_reports():
        r, _ = ttl_as_run(report, crew)
        if r.advice.too_short:
            found.append(
                Finding.said(
                    DEGRADED,
                    "{} = {} s is below the {} s that {} {} needs: a slow request can lose its lease.",
                    r.setting,
                    f"{r.advice.configured:g}",
                    f"{r.advice.needed:.0f}",
                    r.group_kind,
                    r.group,
                )
            )
    return found


def _formula(a: Any) -> str:
    if not a.enough_data:
        return "—"
    return f"{a.slowest_plausible:.2f} + {a.heartbeat_slack:.2f} + {a.margin:.2f} → {a.needed:.0f} s"


def render_ttl(now: datetime) -> SafeString:
    reports = cached_ttl_reports()
    crew = workers(now)
    rows = []
    for report in reports:
        r, source = ttl_as_run(report, crew)
        a = r.advice
        rows.append(
            (
                r.job,
                f"{r.group_kind} {r.group}",
                a.samples,
                _seconds(a.p50),
                _seconds(a.p95),
                _seconds(a.p99),
                _formula(a),
                f"{r.setting} = {a.configured:g} s ({source})",
                ttl_verdict(a),
            )
        )
    interval = weave_settings.HEARTBEAT_INTERVAL
    beat = (
        "the heartbeat interval, a third of the needed TTL (HEARTBEAT_INTERVAL is not set), so needed = 1.5 × "
        "(p99 + margin)"
        if interval is None
        else f"the heartbeat interval {interval:g} s"
    )
    return format_html(
        '<div class="weave-scroll">{}</div><p>Needed TTL = p99 (capped at the request timeout) + heartbeat + margin, '
        "rounded up to a second: heartbeat is {}; margin is max({} s, {}% of p99). A recommendation needs at least "
        "{} samples from the last 24 hours (newest {} per job type). <code>manage.py weave_tune</code> prints the "
        "same figures.</p>",
        table(
            ["job", "group", "samples", "p50", "p95", "p99", "p99 + heartbeat + margin", "configured", "verdict"],
            rows,
            empty="No latency recorded in the last 24 hours.",
        ),
        beat,
        f"{MARGIN_FLOOR:g}",
        f"{MARGIN_SHARE * 100:.0f}",
        MIN_SAMPLES,
        f"{TUNE_LIMIT:,}",
    )


register_panel_defaults = [
    ("leases", "Leases by job type", 5, render_leases),
    ("workers", "Workers", 80, render_workers),
    ("ttl", "Lease TTL: configured and needed", 90, render_ttl),
]


def register_core_panels() -> None:
    """The core's panels and health checks, and the job types' own: each core-run job type gets a panel,
    its part of the verdict and its Prometheus series from its declaration (`weave.jobs.console`)."""
    from weave import dashboard_ops
    from weave.jobs import console as job_console
    from weave.metrics import collect_job_metrics
    from weave.telemetry import register_metrics

    for key, title, order, render in [*register_panel_defaults, *dashboard_ops.PANELS]:
        register_panel(Panel(key=key, title=title, order=order, render=render))
    register_health("weave.ttl", ttl_findings)
    for name, check in dashboard_ops.HEALTH:
        register_health(name, check)
    register_health("weave.jobs", job_console.findings)
    register_metrics("weave.jobs", collect_job_metrics)


def all_panels() -> list[Panel]:
    """The registered panels and one per core-run job type without its own, in their order.

    Job type panels are read at each render: a job type may be registered after start-up (the
    "task" type is, on a site's first `django.tasks` enqueue)."""
    from weave.jobs import console as job_console

    return sorted([*panels(), *job_console.panels()], key=lambda p: (p.order, p.key))


@never_cache
def dashboard_view(request: HttpRequest, admin_site: admin.AdminSite) -> HttpResponse:
    now = db_now()
    verdict_html = render_verdict(now)
    sections = [(p.key, p.title, p.render(now)) for p in all_panels()]
    # Off unless asked for: a reload would move a keyboard or screen reader user back to the top.
    try:
        refresh = max(0, int(request.GET.get("refresh", "0") or 0))
    except ValueError:
        refresh = 0
    context = {
        **admin_site.each_context(request),
        "title": "Weave dashboard",
        "verdict": verdict_html,
        "sections": sections,
        "now": when(now),
        "refresh": refresh,
        "offered_refresh": weave_settings.DASHBOARD_REFRESH,
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

    # Refused here rather than through weave.admin's ReadOnlyAdminMixin: that module needs
    # django.contrib.admin's models, and the core starts (this module is imported at ready) without them.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def register_admin() -> None:
    """Put the dashboard and the `django.tasks` tasks on the default admin site (called from WeaveConfig.ready()).

    The tasks' admin is the job admin every core-run job type gets (`weave.jobs.admin`); the core registers
    it here, in its `ready()`, because the rows are its own."""
    from weave.jobs.admin import TaskAdmin
    from weave.models import TaskRow

    if not admin.site.is_registered(Dashboard):
        admin.site.register(Dashboard, DashboardAdmin)
        if admin.site.index_template is None:
            # The dashboard link at the top of the index, not as the last entry below the fold.
            admin.site.index_template = "weave/admin/index.html"
    if not admin.site.is_registered(TaskRow):
        admin.site.register(TaskRow, TaskAdmin)

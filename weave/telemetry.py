"""Registries the operator console reads: leased job types, latency sources, dashboard panels, metrics.

The core never imports an app. Each app registers what it has in `AppConfig.ready()`:

    register_lease_job("notification", Notification)
    register_latency_source(LatencySource(job="notification", group="backend", ...))
    register_panel(Panel(key="notifications", title="Push notifications", order=10, render=...))
    register_metrics(collect_notification_metrics)

The dashboard (`weave.dashboard`), the Prometheus endpoint (`weave.metrics`), `manage.py weave_tune`
and the TTL system check all read these registries and nothing else.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models
from django.utils.html import format_html
from django.utils.safestring import SafeString

from weave.conf import weave_settings
from weave.leases import Clock, DbNow, default_clock
from weave.tuning import TtlAdvice, recommend_ttl

# How old (by the database clock) a row must be before the metrics' running totals keep it
# (`weave.metrics.RunningCounts`): a transaction that commits after its rows' time is never missed.
COUNT_LAG = timedelta(seconds=60)


# --- database time ------------------------------------------------------------------------------


def db_now() -> datetime:
    """Read the database clock once (aware, UTC): windows and ages are judged by it, not by this host."""
    return default_clock.read(connection.alias)


# --- leased job types ---------------------------------------------------------------------------

_lease_jobs: dict[str, type[models.Model]] = {}


def register_lease_job(job: str, model: type[models.Model]) -> None:
    """Name a leased model, so the console counts its live and expired leases."""
    _lease_jobs[job] = model


def lease_jobs() -> dict[str, type[models.Model]]:
    return dict(sorted(_lease_jobs.items()))


def lease_counts(clock: Clock = default_clock) -> dict[str, dict[str, int]]:
    """Return {job: {"live": n, "expired": n}}, judged by the database clock in the same query.

    Held rows are few (a worker's batch), and a held row always has an expiry: asking for one lets
    the `lease_expires_at` index (every leased model has one; the apps also index it for held rows
    only) serve the count, a range of held rows however many finished rows the table holds.
    """
    now = clock.now()
    result = {}
    for job, model in lease_jobs().items():
        held = model._default_manager.filter(owner__isnull=False, lease_expires_at__isnull=False)
        counts = held.aggregate(
            live=models.Count("pk", filter=models.Q(lease_expires_at__gt=now)),
            expired=models.Count("pk", filter=models.Q(lease_expires_at__lte=now)),
        )
        result[job] = {"live": counts["live"] or 0, "expired": counts["expired"] or 0}
    return result


# --- latency sources and the TTL they need ------------------------------------------------------


@dataclass(frozen=True)
class LatencySource:
    """Recent latencies of one job type, grouped (by backend, by step), and the settings they bear on.

    `fetch(window, limit)` returns {group: [seconds, ...]} for the most recent `limit` samples
    finished within `window` of the database clock.
    """

    job: str
    group: str  # what the keys are: "backend", "step"
    ttl_setting: str  # the WEAVE key of the lease TTL this job runs under
    fetch: Callable[[timedelta, int], dict[str, list[float]]]
    timeout_setting: str | None = None  # the WEAVE key capping one request, if a group is one request


_latency_sources: dict[str, LatencySource] = {}


def register_latency_source(source: LatencySource) -> None:
    _latency_sources[source.job] = source


def latency_sources() -> list[LatencySource]:
    return [_latency_sources[job] for job in sorted(_latency_sources)]


@dataclass(frozen=True)
class TtlReport:
    """The advice for one group of one job type."""

    job: str
    group_kind: str
    group: str
    setting: str
    advice: TtlAdvice


TUNE_WINDOW = timedelta(hours=24)
TUNE_LIMIT = 5_000  # newest samples per job type: 50 of them lie above the p99, enough to place it


def ttl_reports(*, window: timedelta = TUNE_WINDOW, limit: int = TUNE_LIMIT) -> list[TtlReport]:
    """Return the TTL advice per job type and group from recent traffic."""
    reports = []
    interval = weave_settings.HEARTBEAT_INTERVAL
    for source in latency_sources():
        configured = float(getattr(weave_settings, source.ttl_setting))
        timeout = float(getattr(weave_settings, source.timeout_setting)) if source.timeout_setting else None
        for group, values in sorted(source.fetch(window, limit).items()):
            advice = recommend_ttl(values, configured=configured, heartbeat_interval=interval, timeout=timeout)
            reports.append(TtlReport(source.job, source.group, group, source.ttl_setting, advice))
    return reports


# --- dashboard panels ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    """One section of the Weave dashboard: `render(now)` returns its HTML (charts included)."""

    key: str
    title: str
    order: int
    render: Callable[[datetime], SafeString]


_panels: dict[str, Panel] = {}


def register_panel(panel: Panel) -> None:
    _panels[panel.key] = panel


def panels() -> list[Panel]:
    return sorted(_panels.values(), key=lambda p: (p.order, p.key))


# --- the dashboard's verdict ---------------------------------------------------------------------

FAILING, DEGRADED = "failing", "degraded"


@dataclass(frozen=True)
class Finding:
    """One reason the dashboard's verdict is not "healthy": `level` is FAILING or DEGRADED, `text` says
    what is wrong in one sentence, with links to the rows it names."""

    level: str
    text: SafeString

    @classmethod
    def said(cls, level: str, template: str, *args: Any) -> "Finding":
        """A finding whose text is `format_html(template, *args)`: the values escaped, their links kept."""
        return cls(level, format_html(template, *args))


HealthCheck = Callable[[datetime], list[Finding]]
_health: dict[str, HealthCheck] = {}


def register_health(name: str, check: HealthCheck) -> None:
    """Add a function that returns what is wrong now (an empty list when nothing is)."""
    _health[name] = check


def health_checks() -> list[HealthCheck]:
    return [_health[name] for name in sorted(_health)]


# --- Prometheus metric families -----------------------------------------------------------------

MetricsCollector = Callable[[], Iterable[Any]]  # yields prometheus_client metric families
_metrics: dict[str, MetricsCollector] = {}


def register_metrics(name: str, collect: MetricsCollector) -> None:
    """Add a function yielding prometheus_client metric families read from the database."""
    _metrics[name] = collect


def metrics_collectors() -> list[MetricsCollector]:
    return [_metrics[name] for name in sorted(_metrics)]


# --- query helpers the apps' panels share ------------------------------------------------------


class _PercentileCont(models.Aggregate):
    """PostgreSQL's percentile_cont(fraction) WITHIN GROUP (ORDER BY expr)."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = models.FloatField()

    def __init__(self, expression: Any, fraction: float) -> None:
        super().__init__(expression)
        self.extra["fraction"] = float(fraction)


QUANTILES = (0.5, 0.95, 0.99)


def percentiles_by(
    queryset: "models.QuerySet[Any]", keys: list[str], field: str, quantiles: tuple[float, ...] = QUANTILES
) -> dict[tuple[Any, ...], list[float]]:
    """Return {key values: [quantile values]} of `field` over `queryset` grouped by the `keys` annotations.

    PostgreSQL computes them in the query (percentile_cont); other databases get the values and
    compute here, which is fine for the bounded windows the console asks for on a demo database.
    """
    if connection.vendor == "postgresql":
        named = {f"q{i}": _PercentileCont(field, q) for i, q in enumerate(quantiles)}
        rows = queryset.values(*keys).annotate(**named).order_by()
        return {tuple(row[k] for k in keys): [row[f"q{i}"] for i in range(len(quantiles))] for row in rows}
    from weave.tuning import percentile

    grouped: dict[tuple[Any, ...], list[float]] = {}
    for row in queryset.values_list(*keys, field):
        grouped.setdefault(tuple(row[:-1]), []).append(float(row[-1]))
    return {key: [percentile(values, q * 100) for q in quantiles] for key, values in grouped.items()}


def minute_buckets(now: datetime, minutes: int, step: int = 1) -> list[datetime]:
    """Return the starts of the last `minutes` minutes (in steps of `step`), oldest first, ending with now's."""
    end = now.replace(second=0, microsecond=0)
    end -= timedelta(minutes=end.minute % step)
    return [end - timedelta(minutes=m) for m in range(minutes - step, -1, -step)]


EXACT_BELOW = 200_000  # rows; above this, whole-table counts of finished states come from the planner


def planner_counts(model: type[models.Model], column: str) -> dict[str, int] | None:
    """Estimated rows per value of `column`, from PostgreSQL's statistics (no table scan), or None.

    None on other databases, before the table was analysed, and for tables under EXACT_BELOW rows,
    where an exact count is cheap enough. Estimates are as fresh as the last (auto)ANALYZE.
    """
    if connection.vendor != "postgresql":
        return None
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.reltuples, s.most_common_vals::text::text[], s.most_common_freqs "
            "FROM pg_class c LEFT JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = c.relname "
            "AND s.attname = %s WHERE c.oid = to_regclass(%s)",
            [column, table],
        )
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < EXACT_BELOW or row[1] is None:
        return None
    total, values, freqs = row
    return {value: int(round(total * freq)) for value, freq in zip(values, freqs, strict=False)}


def counts_by(
    model: type[models.Model], column: str, values: Iterable[str], *, exact: Iterable[str]
) -> tuple[dict[str, int], bool]:
    """Rows of `model` per value of `column`, every value named, and whether some counts are estimates.

    The `exact` values (the rows an operator acts on) are always counted; on a large PostgreSQL table
    the others come from the planner's statistics (`planner_counts`) instead of a scan of every row.
    """
    estimates = planner_counts(model, column)
    exact = list(exact)
    rows = model._default_manager.order_by()
    if estimates is not None:
        rows = rows.filter(**{f"{column}__in": exact})
    found = dict(rows.values_list(column).annotate(n=models.Count("pk")))
    if estimates is None:
        return {value: found.get(value, 0) for value in values}, False
    return {value: found.get(value, 0) if value in exact else estimates.get(value, 0) for value in values}, True


def count_tiles(
    model: type[models.Model], column: str, values: Iterable[str], *, exact: Iterable[str], label: str = "{}"
) -> list[tuple[str, object, str | None]]:
    """Headline tiles (`weave.charts.stats`) of `counts_by`, each linked to its list; an estimate reads "≈ n"."""
    from weave.display import changelist_url

    exact = list(exact)
    counts, estimated = counts_by(model, column, values, exact=exact)
    return [
        (
            label.format(value),
            f"≈ {n:,}" if estimated and value not in exact else f"{n:,}",
            changelist_url(model, **{f"{column}__exact": value}),
        )
        for value, n in counts.items()
    ]


# --- worker processes ---------------------------------------------------------------------------

REPORT_STALE = timedelta(seconds=45)  # three missed reports (`weave.reports`): the process is gone or frozen


@dataclass(frozen=True)
class Workers:
    """The reports as the console reads them: live ones (seen within REPORT_STALE) and stale ones."""

    live: list[Any]
    stale: list[Any]
    any_reported: bool

    def values(self, key: str) -> list[Any]:
        """The distinct values live workers report for `key` (several when workers disagree)."""
        return sorted({w.config.get(key) for w in self.live if key in w.config}, key=repr)


def workers(now: datetime) -> Workers:
    from weave.models import WorkerReport

    reports = list(WorkerReport.objects.order_by("name"))
    live = [w for w in reports if w.seen_at > now - REPORT_STALE]
    return Workers(live=live, stale=[w for w in reports if w not in live], any_reported=bool(reports))


def listen_report(max_age: float = 3600.0) -> dict[str, Any]:
    """Due-time watchers (`weave.wake`) that probed within `max_age` seconds: how many listen, how many poll, why."""
    from weave.models import WatcherProbe

    recent = WatcherProbe.objects.filter(probed_at__gte=DbNow(timedelta(seconds=-max_age)))
    polling = list(recent.filter(mode="poll").order_by("process").values("process", "reason", "probed_at"))
    return {"listening": recent.filter(mode="listen").count(), "polling": len(polling), "polling_watchers": polling}

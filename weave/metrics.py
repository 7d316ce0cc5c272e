"""Prometheus metrics: one collector that reads the database, plus this process's own counters.

Workers run in many processes on many hosts, so a worker's in-memory counter would see a slice: the
figures are read from the database at scrape time, from the families the apps register
(`weave.telemetry.register_metrics`), merged by name. Counters over insert-only rows (attempts) stay
exact and cheap with `RunningCounts`. Only this process's own work (`weave_metrics_*`) is counted in
memory. prometheus_client (the [metrics] extra) is imported only when a scrape renders, so the apps
import without it; `weave.E007` names the extra when a site mounts `weave.urls` without it.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache

from weave.conf import weave_settings
from weave.telemetry import COUNT_LAG, db_now, metrics_collectors

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

Labels = tuple[str, ...]
LAG: timedelta = COUNT_LAG


def counted_between(
    rows: QuerySet[Any], time: str, *labels: str
) -> Callable[[datetime | None, datetime], dict[Labels, float]]:
    """A `RunningCounts` fetch: how many of `rows` per `labels` have their `time` in (after, upto]."""

    def fetch(after: datetime | None, upto: datetime) -> dict[Labels, float]:
        from django.db.models import Count

        found = rows.filter(**{f"{time}__lte": upto})
        if after is not None:
            found = found.filter(**{f"{time}__gt": after})
        return {tuple(row[:-1]): row[-1] for row in found.order_by().values_list(*labels).annotate(n=Count("pk"))}

    return fetch


class RunningCounts:
    """Exact running totals of insert-only rows, grouped by labels, advanced with delta queries.

    `fetch(after, upto)` returns {labels: count} for rows whose time is in (after, upto]; `after` is
    None on the first call. A row joins the kept totals once it is `LAG` old by the database clock, so
    a transaction that commits after its rows' time is never missed. With a `name`, the totals are
    also kept in the database (`MetricCheckpoint`): a process starts from the newest checkpoint any
    process wrote, so none of them counts the whole history again.
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._upto: datetime | None = None
        self._totals: dict[Labels, float] = {}

    def advance(
        self, fetch: Callable[[datetime | None, datetime], dict[Labels, float]], now: datetime
    ) -> dict[Labels, float]:
        with self._lock:
            upto = now - LAG
            if self.name:
                self._catch_up(upto)
            if self._upto is None or upto > self._upto:
                for labels, count in fetch(self._upto, upto).items():
                    self._totals[labels] = self._totals.get(labels, 0) + count
                self._upto = upto
                if self.name:
                    self._store()
            totals, kept_upto = dict(self._totals), self._upto
        # The rows younger than the lag are counted afresh at every scrape and never kept: a scrape
        # shows a refusal at once, and a row that commits late is counted when it does (insert-only
        # rows, so the sum never goes down).
        for labels, count in fetch(kept_upto, now).items():
            totals[labels] = totals.get(labels, 0) + count
        return totals

    def _catch_up(self, upto: datetime) -> None:
        """Take the stored checkpoint when it is ahead of this process's own (and not past `upto`)."""
        from weave.models import MetricCheckpoint

        stored = MetricCheckpoint.objects.filter(name=self.name, upto__lte=upto).first()
        if stored is not None and (self._upto is None or stored.upto > self._upto):
            self._upto = stored.upto
            self._totals = {tuple(labels): count for labels, count in stored.totals}

    def _store(self) -> None:
        """Write this process's totals as the checkpoint, unless another process stored a later one."""
        from django.db import IntegrityError, transaction

        from weave.models import MetricCheckpoint

        if self._upto is None:
            return
        totals = [[list(labels), count] for labels, count in sorted(self._totals.items())]
        rows = MetricCheckpoint.objects.filter(name=self.name, upto__lt=self._upto)
        if rows.update(upto=self._upto, totals=totals):
            return
        try:
            with transaction.atomic():
                MetricCheckpoint.objects.get_or_create(name=self.name, defaults={"upto": self._upto, "totals": totals})
        except IntegrityError:  # another process created it in between: a later scrape catches up
            pass

    def reset(self) -> None:
        """Forget this process's totals (as a new process would); a stored checkpoint stays."""
        with self._lock:
            self._upto = None
            self._totals = {}


class DatabaseCollector:
    """Yield every registered app's metric families, merged by name, read at scrape time.

    A prometheus_client `Collector` by shape (the registry only calls `collect()`), so defining it
    needs no prometheus_client import.
    """

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for collect in metrics_collectors():
            for family in collect():
                if family.name in merged:
                    merged[family.name].samples.extend(family.samples)
                else:
                    merged[family.name] = family
        return list(merged.values())


@cache
def _process_metrics() -> tuple[Any, Any, Any]:
    """This process's own counters: exact, because this process is the one doing the counting."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    registry = CollectorRegistry(auto_describe=True)
    scrapes = Counter("weave_metrics_scrapes", "Scrapes this process answered.", ["result"], registry=registry)
    collect_seconds = Histogram(
        "weave_metrics_collect_seconds",
        "Time this process spent reading the database for one scrape.",
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        registry=registry,
    )
    return registry, scrapes, collect_seconds


def render() -> bytes:
    """Return the exposition text: the database figures, then this process's counters."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    process_registry, scrapes, collect_seconds = _process_metrics()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(cast("Collector", DatabaseCollector()))
    started = time.perf_counter()
    try:
        body = generate_latest(registry)
    except Exception:
        scrapes.labels("error").inc()
        raise
    collect_seconds.observe(time.perf_counter() - started)
    scrapes.labels("ok").inc()
    return body + generate_latest(process_registry)


def _token_ok(request: HttpRequest, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    # compare_digest: the comparison time must not tell how much of a guessed token was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the metrics to a bearer of WEAVE["METRICS_TOKEN"]; without a token set, to staff sessions only."""
    token = weave_settings.METRICS_TOKEN
    if token:
        if not _token_ok(request, token):
            response = HttpResponse("A valid bearer token is required.\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="weave-metrics"'
            return response
    elif not (request.user.is_authenticated and request.user.is_active and request.user.is_staff):
        return HttpResponse(
            "Staff only: log in to the admin, or set WEAVE['METRICS_TOKEN'] and send it as a bearer token.\n",
            status=403,
            content_type="text/plain",
        )
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    return HttpResponse(render(), content_type=CONTENT_TYPE_LATEST)


def seconds_since(now: datetime, then: datetime | None) -> float:
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())


def scrape_now() -> datetime:
    """The database's time for this scrape (one query)."""
    return db_now()


def collect_lease_metrics() -> Iterable[Metric]:
    """Live and expired leases per registered job type, judged by the database clock."""
    from prometheus_client.core import GaugeMetricFamily

    from weave.telemetry import lease_counts

    leases = GaugeMetricFamily("weave_leases", "Held leases by job type, live or expired.", labels=["job", "state"])
    for job, counts in lease_counts().items():
        for state in ("live", "expired"):
            leases.add_metric([job, state], counts[state])
    yield leases


def collect_retention_metrics() -> Iterable[Metric]:
    """The retention purge: rows purged so far (a counter) and rows due for purging now (a gauge), per kind."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from weave.retention import backlog, progress

    purged = CounterMetricFamily("weave_retention_purged", "Rows deleted by the retention purge.", labels=["kind"])
    due = GaugeMetricFamily(
        "weave_retention_backlog", "Rows past their retention, not yet purged (counted up to a cap).", labels=["kind"]
    )
    for kind, figures in backlog().items():
        purged.add_metric([kind], figures["purged"])
        due.add_metric([kind], figures["due"])
    yield purged
    yield due
    yield GaugeMetricFamily(
        "weave_retention_running", "1 while a purge holds its lease.", value=1 if progress()["running"] else 0
    )


def collect_wake_metrics() -> Iterable[Metric]:
    """Due-time watchers by how they learn of new work: LISTEN, or polling (notifications do not arrive)."""
    from prometheus_client.core import GaugeMetricFamily

    from weave.telemetry import listen_report

    report = listen_report()
    watchers = GaugeMetricFamily(
        "weave_wake_watchers",
        "Watchers that probed in the last hour, by mode (poll: LISTEN hears nothing).",
        labels=["mode"],
    )
    watchers.add_metric(["listen"], report["listening"])
    watchers.add_metric(["poll"], report["polling"])
    yield watchers


_job_attempts = RunningCounts("weave.job_attempts")


def collect_job_metrics() -> Iterable[Metric]:
    """Every core-run job type's series, from its declaration: jobs by state, attempts by outcome, and its
    lease refusals (blocked attempts) in the family the apps report theirs in. Leases are `weave_leases`."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from weave.jobs.console import engine_types, state_counts
    from weave.models import JobAttempt

    types = engine_types()
    jobs = GaugeMetricFamily("weave_jobs", "Jobs by job type and state.", labels=["job", "state"])
    attempts = CounterMetricFamily(
        "weave_job_attempts", "Attempts that ended, by job type and outcome (all workers).", labels=["job", "outcome"]
    )
    refusals = CounterMetricFamily(
        "weave_lease_refusals", "Writes refused because the lease was lost, by job type.", labels=["job"]
    )
    # Not attempts: claims a batch drain gave back before they started (their `released` records).
    given_back = CounterMetricFamily(
        "weave_job_given_back", "Claimed jobs given back unstarted, by job type (all workers).", labels=["job"]
    )
    outcomes = [o for o in JobAttempt.Outcome.values if o != JobAttempt.Outcome.RELEASED]
    between = counted_between(JobAttempt.objects.all(), "finished_at", "job_type", "outcome")
    totals = _job_attempts.advance(between, scrape_now()) if types else {}
    for job in types:
        for state, n in state_counts(job).items():
            jobs.add_metric([job.name, state], n)
        for outcome in outcomes:
            attempts.add_metric([job.name, outcome], totals.get((job.name, outcome), 0))
        given_back.add_metric([job.name], totals.get((job.name, JobAttempt.Outcome.RELEASED.value), 0))
        refusals.add_metric([job.name], totals.get((job.name, JobAttempt.Outcome.BLOCKED.value), 0))
    yield jobs
    yield attempts
    yield refusals
    yield given_back

"""What the push notifications contribute to the operator console: a dashboard panel, latency for the
lease TTL advice, and Prometheus metric families. Registered in `NotificationsConfig.ready()`.

Every query is bounded: counts by status and the due backlog read `notif_due_idx`; the hour and day
windows read `notif_attempt_finished_idx` (finish time, with outcome and latency included); held
leases read the partial index `notif_held_idx`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db.models import Count, F, Min, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce, NullIf, TruncMinute
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from notifications.models import BreakerOpening, DeliveryAttempt, Notification
from weave.conf import weave_settings
from weave.operations import (
    DEGRADED,
    FAILING,
    Finding,
    RunningCounts,
    age,
    bar_chart,
    change_link,
    changelist_url,
    count_tiles,
    counted,
    counted_between,
    counts_by,
    db_now,
    line_chart,
    linked,
    minute_buckets,
    percentiles_by,
    purged_totals,
    register_health,
    said_once,
    seconds_since,
    state_word,
    stats,
    table,
    when,
    workers,
)

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from prometheus_client.metrics_core import Metric

HOUR = timedelta(hours=1)
DAY = timedelta(hours=24)
# The throughput chart's series: "retrying" are attempts after which the notification is tried again
# (temporary, unknown, an answer refused for a lost lease); "failed" are permanent failures, the same
# word the "failed" tile counts.
RETRYING = [DeliveryAttempt.Outcome.TEMPORARY, DeliveryAttempt.Outcome.UNKNOWN, DeliveryAttempt.Outcome.LEASE_LOST]
FAILED = [DeliveryAttempt.Outcome.PERMANENT]
BACKLOG_DEGRADED = 30.0  # seconds the oldest due notification may wait before the verdict mentions it
BACKLOG_FAILING = 120.0
RECENT_BREAKER = timedelta(minutes=15)
# Upper bounds (seconds) of the latency histogram's buckets.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def with_backend(attempts: QuerySet[DeliveryAttempt]) -> QuerySet[Any]:
    """`attempts` annotated with `backend_alias`, the backend each went to: the alias on its receipt.

    Receipts carry their backend, so a window of attempts is read from the attempts alone. A receipt
    written before that field existed has it empty; when the window holds any, those look their
    notification up instead. Whether it does is the first entry of a range of the partial index
    `notif_attempt_unlabelled_idx` (ordered by finish time, so no plan reads more than the window).
    """
    if not attempts.filter(backend="").order_by("finished_at").values_list("pk")[:1]:
        return attempts.annotate(backend_alias=F("backend"))
    notification_backend = Subquery(Notification.objects.filter(pk=OuterRef("notification_id")).values("backend")[:1])
    return attempts.annotate(
        backend_alias=Coalesce(NullIf(F("backend"), Value("")), notification_backend, Value("default"))
    )


# --- figures ---------------------------------------------------------------------------------------


def status_counts() -> tuple[dict[str, int], bool]:
    """Notifications per status, and whether the finished states' counts are estimates (pending is exact:
    a range of `notif_due_idx`)."""
    return counts_by(Notification, "status", Notification.Status.values, exact=[Notification.Status.PENDING])


def due_backlog(now: datetime) -> tuple[int, datetime | None]:
    """Pending rows due by `now` (database time) and the oldest due time among them."""
    due = Notification.objects.pending().filter(next_attempt_at__lte=now)
    agg = due.aggregate(n=Count("pk"), oldest=Min("next_attempt_at"))
    return agg["n"], agg["oldest"]


def throughput(now: datetime) -> tuple[list[datetime], dict[str, list[float]]]:
    minutes = minute_buckets(now, 60)
    rows = (
        DeliveryAttempt.objects.filter(finished_at__gt=now - HOUR, finished_at__lte=now)
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute")
        .annotate(
            delivered=Count("pk", filter=Q(outcome=DeliveryAttempt.Outcome.DELIVERED)),
            retrying=Count("pk", filter=Q(outcome__in=RETRYING)),
            failed=Count("pk", filter=Q(outcome__in=FAILED)),
        )
        .order_by()
    )
    index = {m: i for i, m in enumerate(minutes)}
    names = ("delivered", "retrying", "failed")
    series: dict[str, list[float]] = {name: [0.0] * len(minutes) for name in names}
    for row in rows:
        i = index.get(row["minute"])
        if i is not None:
            counts: dict[str, Any] = dict(row)
            for name in names:
                series[name][i] += counts[name]
    return minutes, series


def latency_by_backend(now: datetime) -> tuple[list[datetime], dict[str, dict[str, list[float | None]]]]:
    """Per backend, per minute of the last hour: p50/p95/p99 of latency in milliseconds."""
    minutes = minute_buckets(now, 60)
    index = {m: i for i, m in enumerate(minutes)}
    qs = with_backend(
        DeliveryAttempt.objects.filter(finished_at__gt=now - HOUR, finished_at__lte=now, latency_ms__isnull=False)
    ).annotate(minute=TruncMinute("finished_at"))
    result: dict[str, dict[str, list[float | None]]] = {}
    for (backend, minute), (p50, p95, p99) in percentiles_by(qs, ["backend_alias", "minute"], "latency_ms").items():
        lines = result.setdefault(str(backend), {name: [None] * len(minutes) for name in ("p50", "p95", "p99")})
        i = index.get(minute)
        if i is not None:
            lines["p50"][i], lines["p95"][i], lines["p99"][i] = p50, p95, p99
    return minutes, result


def outcomes_since(since: datetime, now: datetime) -> dict[str, int]:
    rows = (
        DeliveryAttempt.objects.filter(finished_at__gt=since, finished_at__lte=now)
        .order_by()
        .values_list("outcome")
        .annotate(n=Count("pk"))
    )
    counts = dict(rows)
    return {outcome: counts.get(outcome, 0) for outcome in DeliveryAttempt.Outcome.values}


def breaker_openings(now: datetime, limit: int = 5) -> tuple[int, list[BreakerOpening]]:
    recent = BreakerOpening.objects.filter(opened_at__gt=now - DAY)
    return recent.count(), list(recent.order_by("-opened_at", "-pk")[:limit])


# --- the dashboard panel ----------------------------------------------------------------------------


def render_panel(now: datetime) -> SafeString:
    """The push notifications section of the Weave dashboard."""
    backlog, oldest = due_backlog(now)
    minutes, series = throughput(now)
    lat_minutes, latency = latency_by_backend(now)
    outcomes = outcomes_since(now - HOUR, now)
    openings, last_openings = breaker_openings(now)
    due_url = changelist_url(Notification, due="now")
    headline = stats(
        [
            ("due now (backlog)", backlog, due_url),
            ("oldest due waited", age(seconds_since(now, oldest)) if oldest else "—", due_url if oldest else None),
            *count_tiles(Notification, "status", Notification.Status.values, exact=[Notification.Status.PENDING]),
            ("breaker openings (24 h)", openings, changelist_url(BreakerOpening, opened="24h")),
        ]
    )
    throughput_chart = bar_chart(minutes, series, title="Delivery attempts per minute, last hour")
    throughput_chart = format_html(
        '{}<p class="weave-muted">retrying: temporary, unknown or lease_lost (tried again); failed: permanent, the '
        "same word as the failed tile.</p>",
        throughput_chart,
    )
    if not latency:
        latency = {"default": {name: [None] * len(lat_minutes) for name in ("p50", "p95", "p99")}}
    latency_charts = [
        line_chart(lat_minutes, lines, title=f"Provider latency, backend {backend}", unit="ms")
        for backend, lines in sorted(latency.items())
    ]
    outcome_table = table(
        ["outcome", "attempts in the last hour"],
        [
            (
                state_word(outcome),
                linked(n, changelist_url(DeliveryAttempt, outcome__exact=outcome, finished="1h") if n else None),
            )
            for outcome, n in outcomes.items()
        ],
    )
    breaker_table = table(
        ["opened at", "worker", "reason"],
        [(when(o.opened_at), o.owner, said_once(o.reason)) for o in last_openings],
        empty="No breaker opened in the last 24 hours.",
    )
    charts = "".join(f'<div class="weave-chart-cell">{chart}</div>' for chart in [throughput_chart, *latency_charts])
    return format_html(
        '{}<div class="weave-charts">{}</div>'
        '<div class="weave-row"><div class="weave-cell"><h3>Outcomes, last hour</h3>{}</div>'
        '<div class="weave-cell"><h3>Breaker openings, last 24 hours</h3>{}</div></div>',
        headline,
        SafeString(charts),  # each chart built by format_html
        outcome_table,
        breaker_table,
    )


def health(now: datetime) -> list[Finding]:
    """What is wrong with push delivery now, for the dashboard's verdict: a waiting backlog and its cause,
    a breaker that opened, permanent failures."""
    findings = []
    backlog, oldest = due_backlog(now)
    waited = seconds_since(now, oldest) if oldest else 0.0
    if backlog and waited > BACKLOG_DEGRADED:
        findings.append(
            Finding.said(
                FAILING if waited > BACKLOG_FAILING else DEGRADED,
                "{}, the oldest waiting {}: {}",
                counted(backlog, "notification{} due", changelist_url(Notification, due="now")),
                age(waited),
                backlog_cause(now),
            )
        )
    recent = BreakerOpening.objects.filter(opened_at__gt=now - RECENT_BREAKER).order_by("-opened_at", "-pk")
    last = recent.first()
    if last is not None:
        findings.append(
            Finding.said(
                DEGRADED,
                "{} in the last 15 minutes; the latest at {} by {}: {}",
                counted(recent.count(), "breaker opening{}", changelist_url(BreakerOpening, opened="15m")),
                when(last.opened_at),
                last.owner,
                said_once(last.reason),
            )
        )
    failed = DeliveryAttempt.objects.filter(finished_at__gt=now - HOUR, outcome__in=FAILED).count()
    failures = changelist_url(DeliveryAttempt, outcome__exact=DeliveryAttempt.Outcome.PERMANENT, finished="1h")
    if failed:
        findings.append(
            Finding.said(
                DEGRADED, "{} in the last hour (see their reasons).", counted(failed, "permanent failure{}", failures)
            )
        )
    return findings


STUCK_LISTED = 10  # stuck leases named one by one; the rest are counted
RENEWAL_SLACK = 2.0  # seconds a renewal may come late (a busy database) before its lease is called stuck


def push_ttl(now: datetime) -> float:
    """The push lease TTL as the live workers run it (the longest, when they differ), else this process's."""
    reported = [float(v) for v in workers(now).values("PUSH_LEASE_TTL") if isinstance(v, int | float)]
    return max(reported) if reported else float(weave_settings.PUSH_LEASE_TTL)


def stuck_leases(now: datetime) -> tuple[float, list[Notification]]:
    """Notifications under a live lease whose holder missed its renewal, oldest expiry first, and the TTL used.

    A push worker renews a claim once less than its renew margin is left, and that margin is never under
    a third of the TTL (the heartbeat's rule, DESIGN §2.4): a live lease with less than a third left,
    two seconds of slack aside, belongs to a worker that is frozen or stuck. It is named before it runs out.
    """
    ttl = push_ttl(now)
    left = timedelta(seconds=max(0.0, ttl / 3 - RENEWAL_SLACK))
    held = Notification.objects.filter(owner__isnull=False, lease_expires_at__gt=now, lease_expires_at__lt=now + left)
    return ttl, list(held.order_by("lease_expires_at", "pk")[:STUCK_LISTED])


def stuck_findings(now: datetime) -> list[Finding]:
    """Each stuck notification lease: its notification (linked), holder, fence, and when it runs out.

    One worker's batch (many rows, one owner) is one reason naming each row, as for expired leases.
    """
    ttl, rows = stuck_leases(now)
    by_owner: dict[str, list[Notification]] = {}
    for row in rows:
        by_owner.setdefault(row.owner or "", []).append(row)
    findings = []
    for owner, held in by_owner.items():
        first = held[0]  # the soonest to run out
        assert first.lease_expires_at is not None  # the query asked for held rows only
        fences = sorted({r.fence for r in held})
        one = len(held) == 1
        findings.append(
            Finding.said(
                DEGRADED,
                "Stuck lease{}: {} held by {} at {} {} {} left of {} {} s lease: the renewal its worker owed when "
                "a third was left did not come (frozen or stuck). {} out at {}, then the next claim takes {} "
                "over under {}.",
                "" if one else "s",
                format_html_join(
                    ", ", "{}", ((change_link(Notification, r.pk, f"notification #{r.pk}"),) for r in held)
                ),
                owner,
                f"fence {fences[0]}" if len(fences) == 1 else f"fences {fences[0]}–{fences[-1]}",
                "has" if one else "have",
                age((first.lease_expires_at - now).total_seconds()),
                "its" if one else "their",
                f"{ttl:g}",
                "It runs" if one else "The first runs",
                when(first.lease_expires_at),
                "it" if one else "them",
                f"fence {first.fence + 1}" if one else "the next fence each",
            )
        )
    return findings


def _expired_holders(now: datetime) -> list[SafeString]:
    """One clause per worker whose expired lease holds due rows: how many, its fence(s), since when."""
    held = Notification.objects.due().filter(owner__isnull=False, lease_expires_at__lte=now)
    rows = list(held.order_by("lease_expires_at", "pk").values_list("owner", "fence", "lease_expires_at")[:200])
    by_owner: dict[str, list[tuple[int, datetime]]] = {}
    for owner, fence, expired in rows:
        if owner is not None and expired is not None:  # the query asked for held rows only
            by_owner.setdefault(owner, []).append((fence, expired))
    clauses = []
    for owner, leases in by_owner.items():
        fences = sorted({f for f, _ in leases})
        fence_text = f"fence {fences[0]}" if len(fences) == 1 else f"fences {fences[0]}–{fences[-1]}"
        clauses.append(
            format_html(
                "{} of them held by {} ({}) whose lease expired {} ago: that worker died or froze, and the next "
                "claim takes {} over",
                len(leases),
                owner,
                fence_text,
                age((now - leases[0][1]).total_seconds()),
                "it" if len(leases) == 1 else "them",
            )
        )
    if clauses:
        clauses[-1] = format_html(
            '{} (<a href="{}">see them</a>)',
            clauses[-1],
            changelist_url(Notification, due="now", lease="expired") or "#",
        )
    return clauses


def _not_keeping_up(live: int) -> SafeString:
    """The backlog's cause when live workers hold none of its rows and nothing else stops them."""
    said = "1 live worker, not holding" if live == 1 else f"{live} live workers, none of them holding"
    return format_html("{} these rows: the workers are not keeping up.", said)


def backlog_cause(now: datetime) -> SafeString:
    """Why due notifications wait, every cause the database can show: expired or stuck leases holding them,
    the breaker, no live worker; else the workers are not keeping up."""
    causes = _expired_holders(now)
    _, stuck = stuck_leases(now)
    due_stuck = [r for r in stuck if r.status == Notification.Status.PENDING]
    if due_stuck:
        owners = sorted({r.owner or "" for r in due_stuck})
        causes.append(
            format_html(
                "{} of them held under a lease whose renewal is overdue ({}): it runs out at {}",
                len(due_stuck),
                ", ".join(owners),
                when(min(r.lease_expires_at for r in due_stuck if r.lease_expires_at)),
            )
        )
    # Rows a breaker released wait out its cooldown: an opening older than twice that explains nothing now.
    window = timedelta(seconds=max(60.0, 2 * float(weave_settings.PUSH_BREAKER_COOLDOWN)))
    opening = BreakerOpening.objects.filter(opened_at__gt=now - window).order_by("-opened_at").first()
    if opening is not None:
        causes.append(
            format_html(
                'the breaker opened at {} by {} ({}): rows wait out its cooldown (<a href="{}">openings</a>)',
                when(opening.opened_at),
                opening.owner,
                said_once(opening.reason),
                changelist_url(BreakerOpening, opened="15m") or "#",
            )
        )
    crew = workers(now)
    if not crew.live:
        if crew.any_reported:
            causes.append(format_html("no live worker: the last worker report is older than {} s", 45))
        else:
            causes.append(mark_safe("no worker has reported (is <code>manage.py qcluster</code> running?)"))
    if not causes:
        return _not_keeping_up(len(crew.live))
    return format_html("{}.", format_html_join("; ", "{}", ((c,) for c in causes)))


# --- latency for the lease TTL advice ---------------------------------------------------------------


def recent_latencies(window: timedelta, limit: int) -> dict[str, list[float]]:
    """The newest `limit` send latencies (seconds) finished within `window`, by backend."""
    now = db_now()
    rows = (
        with_backend(DeliveryAttempt.objects.filter(finished_at__gt=now - window, latency_ms__isnull=False))
        .order_by("-finished_at")
        .values_list("backend_alias", "latency_ms")[:limit]
    )
    result: dict[str, list[float]] = {}
    for backend, latency_ms in rows:
        if latency_ms is not None:  # excluded by the filter; the check keeps the type honest
            result.setdefault(str(backend), []).append(latency_ms / 1000)
    return result


# --- Prometheus -------------------------------------------------------------------------------------

_attempts = RunningCounts("notifications.attempts")
_latency = RunningCounts("notifications.latency")


def _attempts_between(after: datetime | None, upto: datetime) -> dict[tuple[str, ...], float]:
    counts = counted_between(DeliveryAttempt.objects.all(), "finished_at", "outcome")(after, upto)
    if after is None:
        # The first count adds what retention purged, so the counter never goes down (weave.retention).
        for outcome, n in purged_totals("attempts").items():
            counts[(outcome,)] = counts.get((outcome,), 0) + n
    return counts


def _latency_between(after: datetime | None, upto: datetime) -> dict[tuple[str, ...], float]:
    """Cumulative bucket counts per backend: ("backend", "le") -> count, plus ("backend", "sum")."""
    qs = DeliveryAttempt.objects.filter(finished_at__lte=upto, latency_ms__isnull=False)
    if after is not None:
        qs = qs.filter(finished_at__gt=after)
    buckets = {f"b{i}": Count("pk", filter=Q(latency_ms__lte=b * 1000)) for i, b in enumerate(LATENCY_BUCKETS)}
    rows = (
        with_backend(qs).values("backend_alias").annotate(total=Count("pk"), ms=Sum("latency_ms"), **buckets).order_by()
    )
    result: dict[tuple[str, ...], float] = {}
    for row in rows:
        values: dict[str, Any] = dict(row)
        backend = str(values["backend_alias"])
        for i, bound in enumerate(LATENCY_BUCKETS):
            result[(backend, repr(bound))] = values[f"b{i}"]
        result[(backend, "+Inf")] = row["total"]
        result[(backend, "sum")] = (row["ms"] or 0) / 1000
    return result


def collect_metrics() -> Iterable[Metric]:
    """The push notifications' metric families, read from the database."""
    from prometheus_client.core import (  # the [metrics] extra
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    now = db_now()
    statuses = GaugeMetricFamily("weave_notifications", "Notifications by status.", labels=["status"])
    counts, _ = status_counts()  # finished states estimated on a large PostgreSQL table (see status_counts)
    for status, n in counts.items():
        statuses.add_metric([status], n)
    yield statuses
    backlog, oldest = due_backlog(now)
    yield GaugeMetricFamily("weave_due_backlog", "Pending notifications due now (database clock).", value=backlog)
    yield GaugeMetricFamily(
        "weave_oldest_due_age_seconds",
        "How long the oldest due notification has waited (database clock); 0 with no backlog.",
        value=seconds_since(now, oldest),
    )
    totals = _attempts.advance(_attempts_between, now)
    attempts = CounterMetricFamily(
        "weave_delivery_attempts", "Push delivery attempts by outcome (all workers).", labels=["outcome"]
    )
    for outcome in DeliveryAttempt.Outcome.values:
        attempts.add_metric([outcome], totals.get((outcome,), 0))
    yield attempts
    refusals = CounterMetricFamily(
        "weave_lease_refusals", "Writes refused because the lease was lost, by job type.", labels=["job"]
    )
    refusals.add_metric(["notification"], totals.get((DeliveryAttempt.Outcome.LEASE_LOST.value,), 0))
    yield refusals
    latency = _latency.advance(_latency_between, now)
    histogram = HistogramMetricFamily(
        "weave_provider_latency_seconds", "Push provider response time per backend.", labels=["backend"]
    )
    for backend in sorted({labels[0] for labels in latency}):
        buckets = [(repr(b), latency.get((backend, repr(b)), 0)) for b in LATENCY_BUCKETS]
        buckets.append(("+Inf", latency.get((backend, "+Inf"), 0)))
        histogram.add_metric([backend], buckets, sum_value=latency.get((backend, "sum"), 0))
    yield histogram
    openings = CounterMetricFamily("weave_breaker_openings", "Circuit breaker openings (all workers).")
    openings.add_metric([], BreakerOpening.objects.count() + sum(purged_totals("breaker_openings").values()))
    yield openings


# Registered on import: `NotificationsConfig.ready()` imports this module to register the panel.
register_health("notifications", health)
register_health("notifications.leases", stuck_findings)

"""What supplier onboarding contributes to the operator console: a dashboard panel, step durations for
the lease TTL advice, and Prometheus metric families. Registered in `OnboardingConfig.ready()`.

Runs by status and step read `onb_run_status_phase_idx`; the last-24-hours attempt views and the
running counters read `onb_attempt_ended_idx`; step durations read `onb_receipt_completed_idx`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db.models import Count, Q
from django.utils.html import format_html
from django.utils.safestring import SafeString

from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.steps.builtin import STEPS
from weave.conf import weave_settings
from weave.operations import (
    DEGRADED,
    FAILING,
    Finding,
    RunningCounts,
    age,
    change_link,
    changelist_url,
    clipped,
    count_tiles,
    counted,
    counted_between,
    counts_by,
    db_now,
    linked,
    planner_counts,
    register_health,
    said_once,
    stats,
    table,
    when,
    workers,
)

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

DAY = timedelta(hours=24)
TROUBLE = [RunAttempt.Outcome.BLOCKED, RunAttempt.Outcome.CRASHED]


def failed_step(phase: str) -> str:
    """The step a failed run stopped at: the one after its last saved step (`phase`)."""
    names: list[str] = [step.name for step in STEPS]
    if phase not in names:
        return names[0]
    index = names.index(phase) + 1
    return names[index] if index < len(names) else phase


# Exact per step, always: the runs an operator may have to act on (a range of onb_run_status_phase_idx).
WATCHED = [OnboardingRun.Status.PENDING, OnboardingRun.Status.RUNNING, OnboardingRun.Status.FAILED]


def _step_label(status: str, phase: str, failed_at: str) -> str:
    if status == OnboardingRun.Status.FAILED:
        # The run records the step it failed at; older rows fall back to the step after the last saved one.
        return f"failed at {failed_at or failed_step(phase)}"
    return phase or "—"


def runs_by_status_and_step() -> tuple[list[tuple[str, str, str]], bool]:
    """(status, step, count) rows, and whether completed/cancelled counts are planner estimates.

    Pending, running and failed runs are counted exactly per step. On a large PostgreSQL table the
    completed and cancelled totals come from the planner's statistics (weave.telemetry.planner_counts)
    instead of a scan of every finished run.
    """
    estimates = planner_counts(OnboardingRun, "status")
    qs = OnboardingRun.objects.order_by()
    if estimates is not None:
        qs = qs.filter(status__in=WATCHED)
    rows = [
        (status, _step_label(status, phase, failed_at), f"{n:,}")
        for status, phase, failed_at, n in qs.values_list("status", "phase", "failed_step").annotate(n=Count("pk"))
    ]
    if estimates is not None:
        for status in (OnboardingRun.Status.COMPLETED, OnboardingRun.Status.CANCELLED):
            rows.append((status, "(any)", f"≈ {estimates.get(status, 0):,}"))
    order = {step.name: i for i, step in enumerate(STEPS)}
    return sorted(rows, key=lambda r: (r[0], order.get(r[1].removeprefix("failed at "), -1))), estimates is not None


def run_status_counts() -> tuple[dict[str, int], bool]:
    """Runs per status; finished ones estimated on a large PostgreSQL table (see runs_by_status_and_step)."""
    return counts_by(OnboardingRun, "status", OnboardingRun.Status.values, exact=WATCHED)


def troubled_attempts(now: datetime, limit: int = 20) -> tuple[dict[str, int], list[RunAttempt]]:
    """Blocked and crashed attempts that ended in the last 24 hours: counts, and the newest with reasons."""
    recent = RunAttempt.objects.filter(ended_at__gt=now - DAY, outcome__in=TROUBLE)
    counts = dict(recent.order_by().values_list("outcome").annotate(n=Count("pk")))
    newest = list(recent.select_related("run__supplier").order_by("-ended_at", "-pk")[:limit])
    return {o: counts.get(o, 0) for o in TROUBLE}, newest


def _run_link(run_id: int) -> SafeString:
    return change_link(OnboardingRun, run_id, f"run #{run_id}")


def _step_url(status: str, label: str) -> str | None:
    if label == "(any)":
        return changelist_url(OnboardingRun, status__exact=status)
    if label.startswith("failed at "):
        return changelist_url(OnboardingRun, status__exact=status, failed_step=label.removeprefix("failed at "))
    return changelist_url(OnboardingRun, status__exact=status, phase=label if label != "—" else "")


def render_panel(now: datetime) -> SafeString:
    """The supplier onboarding section of the Weave dashboard."""
    by_step, _ = runs_by_status_and_step()
    counts, newest = troubled_attempts(now)
    headline = stats(
        [
            *count_tiles(OnboardingRun, "status", OnboardingRun.Status.values, exact=WATCHED, label="{} runs"),
            *(
                (f"{outcome} attempts (24 h)", n, changelist_url(RunAttempt, outcome=outcome, ended="24h"))
                for outcome, n in counts.items()
            ),
        ]
    )
    step_table = table(
        ["status", "step", "runs"],
        [(status, label, linked(n, _step_url(status, label))) for status, label, n in by_step],
        empty="No onboarding runs yet.",
    )
    trouble_table = table(
        ["ended at", "run", "supplier", "outcome", "fence", "reason"],
        [
            (
                when(a.ended_at),
                _run_link(a.run_id),
                a.run.supplier.legal_name,
                a.outcome,
                a.fence,
                clipped(said_once(a.reason)),
            )
            for a in newest
        ],
        empty="No blocked or crashed attempt in the last 24 hours.",
    )
    return format_html(
        '{}<div class="weave-row"><div class="weave-cell"><h3>Runs by status and step</h3>{}</div>'
        '<div class="weave-cell wide"><h3>Blocked and crashed attempts, last 24 hours</h3>'
        '<div class="weave-scroll">{}</div></div></div>',
        headline,
        step_table,
        trouble_table,
    )


STUCK_SLACK = 30.0  # seconds past an attempt's budget plus its lease TTL before it is called stuck
PENDING, FAILED = OnboardingRun.Status.PENDING, OnboardingRun.Status.FAILED
WAITING_DEGRADED = 60.0  # seconds a pending run may wait for its first claim before the verdict says so


def health(now: datetime) -> list[Finding]:
    """What is wrong with onboarding now: failed runs waiting for a fix, stuck or blocked attempts, waiting runs."""
    findings: list[Finding] = []
    failed = OnboardingRun.objects.filter(status=FAILED).count()
    if failed:
        findings.append(
            Finding.said(
                DEGRADED,
                "{} {} for someone to fix the cause and retry.",
                counted(
                    failed, "failed run{}", changelist_url(OnboardingRun, status__exact=OnboardingRun.Status.FAILED)
                ),
                "waits" if failed == 1 else "wait",
            )
        )
    limit = float(weave_settings.ONBOARDING_BUDGET) + float(weave_settings.ONBOARDING_LEASE_TTL) + STUCK_SLACK
    stuck = RunAttempt.objects.filter(outcome=RunAttempt.Outcome.RUNNING, started_at__lt=now - timedelta(seconds=limit))
    for a in stuck.order_by("started_at")[:10]:
        findings.append(
            Finding.said(
                FAILING,
                "Stuck attempt: {} at fence {} held by {} has run for {} (its budget is {} s).",
                _run_link(a.run_id),
                a.fence,
                a.owner,
                age((now - a.started_at).total_seconds()),
                f"{weave_settings.ONBOARDING_BUDGET:g}",
            )
        )
    recent = RunAttempt.objects.filter(ended_at__gt=now - timedelta(hours=1), outcome__in=TROUBLE)
    counts = dict(recent.order_by().values_list("outcome").annotate(n=Count("pk")))
    for outcome, n in sorted(counts.items()):
        findings.append(
            Finding.said(
                DEGRADED,
                "{} in the last hour (a worker lost its lease or stopped).",
                counted(n, f"{outcome} attempt{{}}", changelist_url(RunAttempt, outcome=outcome, ended="1h")),
            )
        )
    waiting = OnboardingRun.objects.filter(
        status=OnboardingRun.Status.PENDING,
        owner__isnull=True,
        created_at__lt=now - timedelta(seconds=WAITING_DEGRADED),
    ).filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lt=now - timedelta(seconds=WAITING_DEGRADED)))
    n = waiting.count()
    if n:
        crew = workers(now)
        cause = "no worker is live" if crew.any_reported and not crew.live else "no worker has claimed them"
        findings.append(
            Finding.said(
                DEGRADED,
                "{} due for over {} s: {}.",
                counted(n, "pending run{}", changelist_url(OnboardingRun, status__exact=PENDING, lease="free")),
                f"{WAITING_DEGRADED:g}",
                cause,
            )
        )
    return findings


# --- step durations for the lease TTL advice --------------------------------------------------------


def recent_step_durations(window: timedelta, limit: int) -> dict[str, list[float]]:
    """Seconds each step's work took, from the newest `limit` receipts saved within `window`.

    A step's work runs from the previous receipt of the same attempt (or the attempt's claim, for its
    first step) to its own receipt. That includes every retry within the step, so it bounds the
    slowest single request from above: the advice errs on the long side.
    """
    now = db_now()
    receipts = list(
        StepReceipt.objects.filter(completed_at__gt=now - window)
        .order_by("-completed_at")
        .values_list("run_id", "fence", "step", "completed_at")[:limit]
    )
    run_ids = {r[0] for r in receipts}
    starts = {
        (run_id, fence): started
        # order_by(): the default ordering ("run" -> the run's own ordering) would join every run.
        for run_id, fence, started in RunAttempt.objects.filter(run_id__in=run_ids)
        .order_by()
        .values_list("run_id", "fence", "started_at")
    }
    previous: dict[tuple[int, int], datetime] = {}
    result: dict[str, list[float]] = {}
    for run_id, fence, step, completed in sorted(receipts, key=lambda r: (r[0], r[3])):
        begun = previous.get((run_id, fence)) or starts.get((run_id, fence))
        previous[(run_id, fence)] = completed
        if begun is not None and completed >= begun:
            result.setdefault(step, []).append((completed - begun).total_seconds())
    return result


# --- Prometheus -------------------------------------------------------------------------------------

_attempts = RunningCounts("onboarding.attempts")


def collect_metrics() -> Iterable[Metric]:
    """Supplier onboarding's metric families, read from the database."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # the [metrics] extra

    now = db_now()
    runs = GaugeMetricFamily("weave_onboarding_runs", "Onboarding runs by status.", labels=["status"])
    counts, _ = run_status_counts()  # finished runs estimated on a large PostgreSQL table
    for status, n in counts.items():
        runs.add_metric([status], n)
    yield runs
    totals = _attempts.advance(counted_between(RunAttempt.objects.all(), "ended_at", "outcome"), now)
    attempts = CounterMetricFamily(
        "weave_run_attempts", "Onboarding run attempts that ended, by outcome (all workers).", labels=["outcome"]
    )
    for outcome in RunAttempt.Outcome.values:
        if outcome != RunAttempt.Outcome.RUNNING:
            attempts.add_metric([outcome], totals.get((outcome,), 0))
    yield attempts
    refusals = CounterMetricFamily(
        "weave_lease_refusals", "Writes refused because the lease was lost, by job type.", labels=["job"]
    )
    refusals.add_metric(["onboarding"], totals.get((RunAttempt.Outcome.BLOCKED.value,), 0))
    yield refusals
    running = RunAttempt.objects.filter(outcome=RunAttempt.Outcome.RUNNING).aggregate(n=Count("pk"))
    yield GaugeMetricFamily("weave_run_attempts_running", "Run attempts still running.", value=running["n"])


# Registered on import: `OnboardingConfig.ready()` imports this module to register the panel.
register_health("onboarding", health)

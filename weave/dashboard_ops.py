"""The dashboard's operations panels: database outages the workers saw, retention, and how wake-ups arrive.

Each is a panel and, where it changes what an operator should do, a finding in the verdict:

- an outage that ended within OUTAGE_RECENT is "degraded": jobs leased while the database was away may
  have been taken over, and the operator should know the workers saw it (times by the database clock,
  see `weave.reports.Link`);
- retention is "degraded" when rows are past their retention and no purge finished for two periods
  (the schedule is not running, or every run fails), not merely because a backlog exists;
- watchers that poll instead of LISTEN are "degraded": due work is picked up up to a second late
  and every worker queries once per poll, which a direct LISTEN connection avoids.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.safestring import SafeString

from weave.charts import age, table, when
from weave.conf import weave_settings
from weave.telemetry import DEGRADED, Finding, listen_report
from weave.wording import how_many

OUTAGE_RECENT = timedelta(minutes=15)  # an outage that ended this long ago is history, not a verdict


# --- database outages --------------------------------------------------------------------------------


@dataclass
class Outage:
    """Overlapping outages reported by several workers: one event, seen by each of them."""

    began_at: datetime
    ended_at: datetime
    workers: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def merge(self, name: str, began: datetime, ended: datetime, error: str) -> None:
        self.began_at, self.ended_at = min(self.began_at, began), max(self.ended_at, ended)
        self.workers.append(name)
        if error and error not in self.errors:
            self.errors.append(error)


def _last_outage(report: Any) -> tuple[datetime, datetime, str] | None:
    last = (report.link or {}).get("last")
    if not last:
        return None
    began, ended = parse_datetime(str(last.get("began_at"))), parse_datetime(str(last.get("ended_at")))
    if began is None or ended is None:
        return None
    return began, ended, str(last.get("error") or "")


def outages(since: datetime) -> list[Outage]:
    """The outages that ended after `since`, newest first, one per overlapping group of workers' reports."""
    from weave.models import WorkerReport

    seen = []
    for report in WorkerReport.objects.order_by("name"):
        last = _last_outage(report)
        if last is not None and last[1] >= since:
            seen.append((report.name, *last))
    seen.sort(key=lambda s: s[1])
    grouped: list[Outage] = []
    for name, began, ended, error in seen:
        if grouped and began <= grouped[-1].ended_at:
            grouped[-1].merge(name, began, ended, error)
        else:
            grouped.append(Outage(began, ended, [name], [error] if error else []))
    return list(reversed(grouped))


def _outage_text(outage: Outage, now: datetime) -> SafeString:
    count = len(outage.workers)
    return format_html(
        "Database outage: {} worker process{} lost the database from about {} to {} ({}, ended {} ago, database "
        "clock); first error: {}. They reconnected on their own; a job leased then was taken over once its lease "
        "ran out.",
        count,
        "" if count == 1 else "es",
        when(outage.began_at),
        when(outage.ended_at),
        age((outage.ended_at - outage.began_at).total_seconds()),
        age((now - outage.ended_at).total_seconds()),
        "; ".join(outage.errors) or "not recorded",
    )


def outage_findings(now: datetime) -> list[Finding]:
    return [Finding(DEGRADED, _outage_text(o, now)) for o in outages(now - OUTAGE_RECENT)]


def _length(began: datetime, ended: datetime) -> str:
    return age((ended - began).total_seconds())


def render_outages(now: datetime) -> SafeString:
    from weave.models import WorkerReport

    rows = []
    for report in WorkerReport.objects.order_by("name"):
        link = report.link or {}
        last = _last_outage(report)
        rows.append(
            (
                report.name,
                link.get("outages", 0),
                "—" if last is None else f"{when(last[0])} – {when(last[1])} ({_length(last[0], last[1])})",
                "—" if last is None else (last[2] or "not recorded"),
            )
        )
    return format_html(
        "{}<p>A worker cut off from the database cannot write while it lasts: the first report after it records "
        "the outage. Its end is the database clock when that worker's queries answered again; its start is that "
        "end minus the time the worker measured since its first failed query. Outages that ended in the last {} "
        "appear in the verdict.</p>",
        table(
            ["worker", "outages since it started", "last outage (database clock)", "first error"],
            rows,
            empty="No worker has reported yet.",
        ),
        f"{OUTAGE_RECENT.total_seconds() / 60:g} minutes",
    )


# --- retention ----------------------------------------------------------------------------------------


def _purge_overdue(progress: dict[str, Any], now: datetime) -> float | None:
    """Seconds since the last purge finished when that is more than two periods (None when it is not)."""
    period = float(weave_settings.RETENTION_EVERY) * 60.0 + float(weave_settings.RETENTION_BUDGET)
    finished = progress.get("last_finished_at")
    if progress.get("running"):
        return None
    if finished is None:
        return float("inf")
    late = (now - finished).total_seconds()
    return late if late > 2 * period else None


def retention_findings(now: datetime) -> list[Finding]:
    from weave.retention import backlog, progress

    due = {kind: f for kind, f in backlog().items() if f["due"]}
    if not due:
        return []
    late = _purge_overdue(progress(), now)
    if late is None:
        return []
    kinds = ", ".join(f"{kind} {f['due']:,}{'+' if f['capped'] else ''}" for kind, f in due.items())
    since = "no purge has finished yet" if late == float("inf") else f"the last purge finished {age(late)} ago"
    return [
        Finding.said(
            DEGRADED,
            "Retention purge behind: rows past their retention wait ({}), and {} although it runs every {} min: "
            "is the weave.retention schedule running, and does its task succeed?",
            kinds,
            since,
            weave_settings.RETENTION_EVERY,
        )
    ]


def render_retention(now: datetime) -> SafeString:
    from weave.retention import backlog, progress

    figures = backlog()
    rows = [
        (
            kind,
            "kept forever" if f["days"] is None else f"{f['days']:g} days",
            f"{f['due']:,}{'+' if f['capped'] else ''}",
            f"{f['purged']:,}",
        )
        for kind, f in figures.items()
    ]
    state = progress()
    running = f"running now, held by {state.get('owner')}" if state["running"] else "not running"
    return format_html(
        "{}<p>The purge is {}. Last started {}, last finished {} ({}). Every purge has deleted {} rows in all. It runs "
        "every {} min, {} rows per transaction, for at most {} s per run; a backlog left by one run is resumed by "
        "the next.</p>",
        table(["kind", "kept", "past retention now", "purged so far"], rows, empty="No retention registered."),
        running,
        when(state["last_started_at"]),
        when(state["last_finished_at"]),
        state["last_outcome"] or "no outcome yet",
        f"{state['deleted']:,}",
        weave_settings.RETENTION_EVERY,
        weave_settings.RETENTION_BATCH,
        f"{float(weave_settings.RETENTION_BUDGET):g}",
    )


# --- wake-ups -----------------------------------------------------------------------------------------


def wake_findings(now: datetime) -> list[Finding]:
    from weave.wake import POLL_MAX

    report = listen_report()
    if not report["polling"]:
        return []
    reasons = sorted({str(w["reason"]) for w in report["polling_watchers"]})
    return [
        Finding.said(
            DEGRADED,
            "Wake-ups by polling: {} of {} {} the next due time every {} s instead of listening ({}). Retries "
            "and takeovers go out up to that late; set WEAVE['WAKE_LISTEN_DB'] to a direct (not pooled) connection.",
            report["polling"],
            how_many(report["polling"] + report["listening"], "worker watcher{}"),
            "polls" if report["polling"] + report["listening"] == 1 else "poll",
            f"{POLL_MAX:g}",
            "; ".join(reasons),
        )
    ]


def render_wake(now: datetime) -> SafeString:
    from weave.wake import POLL_MAX

    report = listen_report()
    rows = [(w["process"], w["reason"], when(w["probed_at"])) for w in report["polling_watchers"]]
    return format_html(
        "<p>In the last hour {} watcher{} heard the probe notification on their LISTEN connection and {} did not, "
        "and poll instead (every {} s at most).</p>{}",
        report["listening"],
        "" if report["listening"] == 1 else "s",
        report["polling"],
        f"{POLL_MAX:g}",
        table(["polling watcher", "why", "probed (database clock)"], rows, empty="No watcher polls."),
    )


PANELS = [
    ("outages", "Database outages the workers saw", 82, render_outages),
    ("retention", "Retention", 84, render_retention),
    ("wake", "Wake-ups", 86, render_wake),
]
HEALTH = [
    ("weave.outages", outage_findings),
    ("weave.retention", retention_findings),
    ("weave.wake", wake_findings),
]

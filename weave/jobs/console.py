"""What operators see of every job type the core runs, read from its declaration alone.

A job type on `weave.models.JobModel` (a site's own, the `django.tasks` "task" type, the FCM topic
jobs) gets, with no code of its own:

- a dashboard panel: jobs by state, live and expired leases, attempts of the last hour by outcome and
  the latest troubled attempts with their reasons (`panel_for`);
- its part of the dashboard's verdict: blocked, failed and retried attempts of the last hour, and
  attempts whose worker stopped without ending them (`findings`);
- the figures of its Prometheus series (`weave.metrics.collect_job_metrics` reads `state_counts`).

A job type that declares its own `panel` (push notifications, onboarding) keeps it.
"""

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Exists, OuterRef
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from weave.charts import stats, table, when
from weave.display import change_link, changelist_url, clipped, said_once, state_word
from weave.jobs.declaration import JobType, job_types
from weave.models import JobAttempt, JobModel, JobState
from weave.telemetry import DEGRADED, Finding, Panel, count_tiles, counts_by, lease_counts

RECENT = timedelta(hours=1)  # the window of the verdict and of the panel's attempt counts
TROUBLE = (JobAttempt.Outcome.BLOCKED, JobAttempt.Outcome.FAILED, JobAttempt.Outcome.RETRY)
TROUBLE_LISTED = 10  # troubled attempts named one by one on a panel
NAMED_IN_FINDING = 5  # jobs named (linked) in one finding; the rest are counted
PANEL_ORDER = 30  # after the built-in apps' panels, before workers and the TTL advice

_TILE = {"blocked": "blocked", "failed": "failed", "retry": "retried", "done": "done"}
# What each troubled outcome means, for the verdict.
_MEANING: dict[str, str] = {
    JobAttempt.Outcome.BLOCKED: "lost its lease and wrote nothing after it (blocked)",
    JobAttempt.Outcome.FAILED: "failed for good",
    JobAttempt.Outcome.RETRY: "failed and will retry",
}
# The same said of more than one attempt, where the words differ.
_MEANING_OF_SEVERAL: dict[str, str] = {
    JobAttempt.Outcome.BLOCKED: "lost their leases and wrote nothing after them (blocked)",
}


def engine_types() -> list[JobType]:
    """The registered job types whose rows are `JobModel`s: the ones these surfaces are drawn for."""
    return [job for job in job_types() if issubclass(job.model, JobModel)]


def plural_name(job: JobType) -> str:
    return str(job.model._meta.verbose_name_plural)


def state_counts(job: JobType) -> dict[str, int]:
    """Rows of `job` per state, every state named (0 when none); see `counted_states`."""
    return counted_states(job)[0]


def counted_states(job: JobType) -> tuple[dict[str, int], bool]:
    """Rows of `job` per state, and whether the finished states' counts are estimates (pending, undoing: exact)."""
    return counts_by(job.model, "state", JobState.values, exact=[JobState.PENDING, JobState.UNDOING])


def outcome_counts(job: JobType, since: datetime) -> dict[str, int]:
    """Attempts of `job` that ended after `since`, per outcome, every outcome named."""
    rows = JobAttempt.objects.filter(job_type=job.name, finished_at__gt=since)
    found = dict(rows.order_by().values_list("outcome").annotate(n=Count("pk")))
    return {outcome: found.get(outcome, 0) for outcome in JobAttempt.Outcome.values}


def troubled_attempts(job: JobType, since: datetime, limit: int = TROUBLE_LISTED) -> list[JobAttempt]:
    """The newest blocked, failed and retried attempts of `job` that ended after `since`."""
    rows = JobAttempt.objects.filter(job_type=job.name, finished_at__gt=since, outcome__in=TROUBLE)
    return list(rows.order_by("-finished_at", "-pk")[:limit])


def job_link(job: JobType, pk: object) -> SafeString:
    """`shipment #3`, linked to the row's admin page when it has one."""
    return change_link(job.model, pk, f"{job.name} #{pk}")


def render_panel(job: JobType, now: datetime) -> SafeString:
    """The dashboard panel of one job type."""
    model = job.model
    leases = lease_counts().get(job.name, {"live": 0, "expired": 0})
    outcomes = outcome_counts(job, now - RECENT)
    tiles = count_tiles(model, "state", JobState.values, exact=[JobState.PENDING, JobState.UNDOING])
    tiles += [(f"{kind} leases", leases[kind], changelist_url(model, lease=kind)) for kind in ("live", "expired")]
    tiles += [(f"{_TILE[o]} attempts (1 h)", outcomes[o], None) for o in (*TROUBLE, JobAttempt.Outcome.DONE)]
    trouble = table(
        ["ended at", "job", "outcome", "fence", "worker", "reason"],
        [
            (
                when(a.finished_at),
                job_link(job, a.job_id),
                state_word(a.outcome),
                a.fence,
                clipped(a.owner, one_line=True),
                clipped(said_once(a.reason)),
            )
            for a in troubled_attempts(job, now - RECENT)
        ],
        empty="No blocked, failed or retried attempt in the last hour.",
    )
    return format_html(
        '{}<h3>Blocked, failed and retried attempts, last hour</h3><div class="weave-scroll">{}</div>'
        '<p class="weave-muted">Lease TTL {} s. <code>manage.py weave_explain {} &lt;id&gt;</code> tells one '
        "job's story.</p>",
        stats(tiles),
        trouble,
        f"{job.lease_ttl():g}",
        job.explain_as or job.name,
    )


def panel_for(job: JobType) -> Panel:
    """The dashboard panel of `job` as the dashboard lists it."""
    title = f"Jobs: {plural_name(job)} ({job.name})"

    def render(now: datetime) -> SafeString:
        return render_panel(job, now)

    return Panel(key=f"job-{job.name}", title=title, order=PANEL_ORDER, render=render)


def panels() -> list[Panel]:
    """A panel for every job type the core runs that declares none of its own."""
    return [panel_for(job) for job in engine_types() if job.panel is None]


def _jobs_named(job: JobType, newest: list[JobAttempt], rows: Any) -> tuple[int, SafeString]:
    """How many jobs the attempts `rows` are of, and those of `newest` (its newest) linked, the rest counted.

    "shipment #3, shipment #4 and 2 more jobs": the names are of jobs, so the rest is counted in jobs too.
    """
    named = list(dict.fromkeys(a.job_id for a in newest))
    links = format_html_join(", ", "{}", ((job_link(job, pk),) for pk in named))
    # Fewer attempts than the limit came back: every one is listed, so no other job is left to count.
    jobs = rows.order_by().values("job_id").distinct().count() if len(newest) >= NAMED_IN_FINDING else len(named)
    more = jobs - len(named)
    return jobs, format_html("{}{}", links, f" and {more} more job{'' if more == 1 else 's'}" if more > 0 else "")


def _finding(job: JobType, outcome: str, attempts: list[JobAttempt], count: int, named: SafeString) -> Finding:
    latest = attempts[0]
    return Finding(
        DEGRADED,
        format_html(
            "{} {} attempt{} in the last hour {} ({}); the latest at {}: {}",
            count,
            job.name,
            "" if count == 1 else "s",
            _MEANING[outcome] if count == 1 else _MEANING_OF_SEVERAL.get(outcome, _MEANING[outcome]),
            named,
            when(latest.finished_at),
            clipped(said_once(latest.reason) or "no reason given"),
        ),
    )


def takeovers_after_a_crash(job: JobType, since: datetime) -> tuple[int, list[JobAttempt], SafeString]:
    """Attempts of `job` that ended after `since` and had taken their job over from an attempt with no record.

    A claim counts an attempt and its record is written when it ends, so a worker killed mid-job leaves
    a gap in the job's attempt numbers; the next attempt's record is the first trace of it. (A task's
    takeover records the lapsed attempt as blocked, so leaves no gap.) A claim given back unstarted is no
    attempt: its record neither fills a gap nor counts as a takeover. Returns how many jobs had one, the
    newest takeovers, and their jobs named (see `_jobs_named`).
    """
    attempts = JobAttempt.objects.ran()
    before = attempts.filter(job_type=job.name, job_id=OuterRef("job_id"), number=OuterRef("number") - 1)
    rows = attempts.filter(~Exists(before), job_type=job.name, finished_at__gt=since, number__gt=1)
    newest = list(rows.order_by("-finished_at", "-pk")[:NAMED_IN_FINDING])
    jobs, named = _jobs_named(job, newest, rows)
    return jobs, newest, named


def _crash_finding(job: JobType, count: int, takeovers: list[JobAttempt], named: SafeString) -> Finding:
    latest = takeovers[0]
    return Finding(
        DEGRADED,
        format_html(
            "{} {} job{} in the last hour had an attempt that never ended: its worker stopped while holding "
            "the job, and a later attempt took it over ({}); the latest takeover at {} by {} at fence {}",
            count,
            job.name,
            "" if count == 1 else "s",
            named,
            when(latest.started_at),
            clipped(latest.owner, one_line=True),
            latest.fence,
        ),
    )


def findings(now: datetime) -> list[Finding]:
    """What is wrong with the core-run job types now: their blocked, failed and retried attempts, and the
    attempts whose worker stopped without ending them."""
    found = []
    for job in engine_types():
        crashed, takeovers, named = takeovers_after_a_crash(job, now - RECENT)
        if crashed:
            found.append(_crash_finding(job, crashed, takeovers, named))
        counts = outcome_counts(job, now - RECENT)
        for outcome in TROUBLE:
            if not counts[outcome]:
                continue
            rows = JobAttempt.objects.filter(job_type=job.name, finished_at__gt=now - RECENT, outcome=outcome)
            newest = list(rows.order_by("-finished_at", "-pk")[:NAMED_IN_FINDING])
            found.append(_finding(job, outcome, newest, counts[outcome], _jobs_named(job, newest, rows)[1]))
    return found

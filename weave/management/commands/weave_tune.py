"""`manage.py weave_tune`: the lease TTL recent traffic needs, per job type and group, with the data."""

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand

from weave.conf import weave_settings
from weave.dashboard import ttl_as_run
from weave.telemetry import TUNE_LIMIT, Workers, db_now, ttl_reports, workers
from weave.tuning import MARGIN_FLOOR, MARGIN_SHARE, MIN_SAMPLES, PERCENTILE


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _configured_from(crew: Workers, settings: list[str]) -> str:
    """Say where the "configured" figures come from: the live workers' reports, or this process."""
    if not crew.live:
        return "Configured TTLs: as this process reads them (no live worker has reported what it runs with)."
    parts = []
    for setting in settings:
        theirs = ", ".join(f"{v:g} s" for v in crew.values(setting) if isinstance(v, int | float)) or "not reported"
        mine = float(getattr(weave_settings, setting))
        differs = "" if theirs == f"{mine:g} s" else f" (this process reads {mine:g} s)"
        parts.append(f"{setting} {theirs}{differs}")
    live = len(crew.live)
    who = "1 live worker runs" if live == 1 else f"{live} live workers run"
    return f"Configured TTLs as {who} them: " + "; ".join(parts) + "."


class Command(BaseCommand):
    help = "Print the lease TTL that recent latencies need, beside the configured TTL, with the data behind it."
    # Read-only and asked for while diagnosing: it prints its own answer, not the site's check warnings
    # (`manage.py check` says those).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--hours", type=float, default=24.0, help="How far back to read samples (default 24).")
        parser.add_argument("--limit", type=int, default=TUNE_LIMIT, help="Newest samples per job type.")

    def handle(self, *args: Any, hours: float, limit: int, **options: Any) -> None:
        reports = ttl_reports(window=timedelta(hours=hours), limit=limit)
        crew = workers(db_now())
        interval = weave_settings.HEARTBEAT_INTERVAL
        beat = (
            "a third of the needed TTL (HEARTBEAT_INTERVAL not set), so needed = 1.5 x (p99 + margin)"
            if interval is None
            else f"{interval:g} s"
        )
        self.stdout.write(
            f"Needed TTL = p{PERCENTILE:g} latency (capped at the request timeout) + heartbeat + margin, rounded up "
            f"to a second; heartbeat: {beat}; margin: max({MARGIN_FLOOR:g} s, {MARGIN_SHARE:.0%} of "
            f"p{PERCENTILE:g}). A recommendation needs at least {MIN_SAMPLES} samples; last {hours:g} h.\n"
        )
        if not reports:
            self.stdout.write("No latency recorded in that window: nothing to recommend yet.")
            return
        header = f"{'job':<13}{'group':<34}{'samples':>8}{'p50 s':>9}{'p95 s':>9}{'p99 s':>9}{'needed':>8}  configured"
        self.stdout.write(header)
        needed_by_setting: dict[str, float] = {}
        for report in reports:
            r, _ = ttl_as_run(report, crew)
            a = r.advice
            shown = "—" if a.needed is None else f"{a.needed:.0f} s"
            self.stdout.write(
                f"{r.job:<13}{(r.group_kind + ' ' + r.group)[:33]:<34}{a.samples:>8}{_s(a.p50):>9}{_s(a.p95):>9}"
                f"{_s(a.p99):>9}{shown:>8}  {r.setting}={a.configured:g} s"
            )
            if a.needed is not None:
                needed_by_setting[r.setting] = max(needed_by_setting.get(r.setting, 0.0), a.needed)
        self.stdout.write("")
        self.stdout.write(_configured_from(crew, sorted({r.setting for r in reports})))
        for setting, needed in sorted(needed_by_setting.items()):
            run_with = [float(v) for v in crew.values(setting) if isinstance(v, int | float)]
            configured = max(run_with) if run_with else float(getattr(weave_settings, setting))
            if configured < needed:
                self.stdout.write(
                    self.style.WARNING(f"{setting}: raise from {configured:g} s to at least {needed:.0f} s.")
                )
            else:
                self.stdout.write(self.style.SUCCESS(f"{setting}: {configured:g} s covers the {needed:.0f} s needed."))

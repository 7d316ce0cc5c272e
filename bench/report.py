"""Collect the numbers of one run and render them as the Markdown report."""

import os
import platform
import statistics
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tools.processes import PROJECT_ROOT

TARGET_SPEEDUP = 20.0
TARGET_FENCING = 0.9
TARGET_ROUND_TRIPS = 3.0
TARGET_RECOVERY_SLACK = 5.0


def machine_info() -> dict[str, str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg = cursor.fetchone()[0]
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    import django
    import django_q

    return {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "cores": str(os.cpu_count()),
        "cpu": cpu or platform.processor(),
        "postgresql": pg,
        "python": platform.python_version(),
        "django": django.get_version(),
        "django-q2": ".".join(map(str, django_q.VERSION)),
        "commit": commit,
    }


@dataclass
class Results:
    args: Any
    machine: dict[str, str]
    throughput: list = field(default_factory=list)
    fencing: list = field(default_factory=list)
    scaling: dict = field(default_factory=dict)
    default_batch: int = 100
    queries: dict = field(default_factory=dict)
    recovery: list = field(default_factory=list)
    profiles: dict = field(default_factory=dict)  # latency label -> (rows, seconds, pyinstrument text)
    group_finish: Any = None
    baseline_nosave: dict = field(default_factory=dict)  # latency -> Throughput with save=False
    backends: list = field(default_factory=list)  # scenarios.BackendPoint, one per push backend
    total_seconds: float = 0.0


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _ok(met: bool) -> str:
    return "met" if met else "**missed**"


def _section_throughput(r: Results, out: list[str], targets: list[list[str]]) -> None:
    out += ["## 1. Throughput against the one-task-per-notification baseline", ""]
    rows = []
    for latency, weave, base in r.throughput:
        ratio = weave.rate / base.rate
        nosave = r.baseline_nosave.get(latency)
        rows.append(
            [
                f"{latency} ms",
                weave.workers,
                f"{weave.rate:,.0f}",
                f"{base.rate:,.1f}",
                f"**{ratio:,.1f}×**",
                f"{nosave.rate:,.1f} ({weave.rate / nosave.rate:,.1f}×)" if nosave else "",
                f"{weave.xacts_per_row:.2f} / {base.xacts_per_row:.2f}",
            ]
        )
        if latency == 50:
            targets.append([f"Weave/baseline at 50 ms, W={weave.workers}", "≥ 20×", f"{ratio:.1f}×", _ok(ratio >= 20)])
    out.append(
        _table(
            [
                "provider latency",
                "W",
                "Weave notif/s",
                "baseline notif/s",
                "Weave/baseline",
                "baseline with `save=False` (Weave/it)",
                "DB transactions per notification, Weave / baseline",
            ],
            rows,
        )
    )
    if r.group_finish is not None:
        base50 = next((b for lat, _, b in r.throughput if lat == 50), None)
        g = r.group_finish
        ratio = f"{g.rate / base50.rate:,.1f}×" if base50 else ""
        out += [
            "",
            "Prototype of the recommended change (`bench/variants.py`: each group of answers finished by one"
            f" guarded statement), 50 ms, W={g.workers}: **{g.rate:,.0f}/s**, {ratio} the baseline.",
        ]
    out += [
        "",
        "DB transactions per notification: every session's commits in the bench database during the run",
        "(`pg_stat_database`), so the baseline's include django-q2's own queue and result bookkeeping.",
        "The baseline runs with the site's `Q_CLUSTER` (`save_limit` 1000). django-q2's monitor then prunes",
        "results on every task by reading every saved success row `FOR UPDATE`, in one process for the whole",
        "cluster; the `save=False` column enqueues the same tasks without a result row, the baseline's best case.",
        "",
    ]


def _section_fencing(r: Results, out: list[str], targets: list[list[str]]) -> None:
    a = r.args
    out += ["## 2. Cost of fencing (provider at 0 ms)", ""]
    rows = []
    ratios = []
    for i, (fenced, unfenced) in enumerate(r.fencing, 1):
        ratio = fenced.rate / unfenced.rate
        ratios.append(ratio)
        rows.append([i, f"{fenced.rate:,.0f}", f"{unfenced.rate:,.0f}", f"{ratio:.2f}"])
    overall = statistics.median(ratios)
    rows.append(["median", "", "", f"**{overall:.2f}**"])
    out.append(_table(["pair", "fenced notif/s", "unfenced notif/s", "fenced/unfenced"], rows))
    out += [
        "",
        f"W={r.fencing[0][0].workers}, N={a.n:,} each, run alternately. Unfenced is `bench/unfenced.py`: the same",
        "claim and sending, with the `owner`/`fence`/expiry conditions dropped from the finish and renewal writes.",
        "",
    ]
    targets.append(["fenced/unfenced at 0 ms", "≥ 0.9", f"{overall:.2f}", _ok(overall >= TARGET_FENCING)])


def _section_queries(r: Results, out: list[str], targets: list[list[str]]) -> None:
    out += ["## 3. Database work per delivered notification (in-process, counted on every thread)", ""]
    rows = []
    for key, (counts, delivered, what) in r.queries.items():
        per = max(delivered, 1)
        kinds = ", ".join(f"{k} {v / per:.2f}" for k, v in sorted(counts.by_kind.items()))
        rows.append(
            [
                key,
                what,
                delivered,
                f"{counts.statements / per:.2f}",
                f"{counts.transactions / per:.2f}",
                f"**{counts.round_trips / per:.2f}**",
                kinds,
            ]
        )
    out.append(
        _table(["path", "what ran", "rows", "statements", "transactions", "round trips", "statements by kind"], rows)
    )
    out += [
        "",
        "Round trips count what psycopg 3 sends: each statement, plus `BEGIN` and `COMMIT` for every",
        "`atomic()` block that ran one. The baseline's task body is only part of its cost: django-q2 also",
        "enqueues (above), then dequeues, acknowledges and saves a result per task (see the transactions",
        "column of table 1).",
        "",
    ]
    if "weave" in r.queries:
        counts, delivered, _ = r.queries["weave"]
        trips = counts.round_trips / max(delivered, 1)
        targets.append(
            ["round trips per delivered notification", "≤ 3", f"{trips:.2f}", _ok(trips <= TARGET_ROUND_TRIPS)]
        )


def _section_recovery(r: Results, out: list[str], targets: list[list[str]]) -> None:
    out += ["## 4. Recovery after SIGKILL", ""]
    rows = []
    for rec in r.recovery:
        met = rec["recovered"] <= rec["ttl"] + TARGET_RECOVERY_SLACK
        rows.append(
            [
                f"{rec['ttl']:g} s",
                rec["held"],
                f"{rec['lease_left']:.1f} s",
                f"{rec['recovered']:.1f} s",
                f"{rec['recovered'] - rec['ttl']:+.1f} s",
                rec["resent_keys"],
                _ok(met),
            ]
        )
        targets.append(
            [
                f"recovery, lease TTL {rec['ttl']:g} s",
                f"≤ {rec['ttl'] + TARGET_RECOVERY_SLACK:g} s",
                f"{rec['recovered']:.1f} s",
                _ok(met),
            ]
        )
    out.append(
        _table(
            [
                "lease TTL",
                "rows pending at the kill",
                "lease left at the kill",
                "all finished after",
                "vs TTL",
                "keys sent twice (same Idempotency-Key)",
                "≤ TTL + 5 s",
            ],
            rows,
        )
    )
    out += [
        "",
        "Two identical clusters (2 workers each) run; the one whose drain claims the full batch of 100 is",
        "SIGKILLed (its whole process group) once its first row is delivered, provider latency 200 ms. Timed from",
        "the kill until the other cluster has finished every row of the batch. One `notification_create` a",
        "second stands in for live traffic (each enqueues a drain); with no traffic at all the rows wait for the",
        "minute sweep instead: up to TTL + 60 s + django-q2's 30 s scheduler cycle. The rows that were in flight",
        "at the kill go out again with the same Idempotency-Key (the provider dedups them).",
        "",
    ]


def _section_scaling(r: Results, out: list[str], targets: list[list[str]]) -> None:
    a = r.args
    out += ["## 5. Scaling (provider at 50 ms)", ""]
    rows = []
    for (workers, batch), point in sorted(r.scaling.items()):
        rows.append([workers, batch, f"{point.rate:,.0f}", f"{point.seconds:.1f} s"])
    out.append(_table(["W", "batch size", "notif/s", f"time for {a.n:,}"], rows))
    out += ["", f"Concurrency per worker is the default; the W rows use batch size {r.default_batch}.", ""]


def _section_backends(r: Results, out: list[str], targets: list[list[str]]) -> None:
    out += ["## 6. Push backends (one in-process drain each, provider fakes at 50 ms)", ""]
    rows = []
    for p in r.backends:
        versions = ", ".join(f"HTTP/{v}: {c:,}" for v, c in sorted(p.http_versions.items()))
        done = ", ".join(f"{k} {v:,}" for k, v in sorted(p.statuses.items()))
        rows.append([p.alias, f"{p.n:,}", f"{p.seconds:.1f} s", f"{p.rate:,.0f}", versions,
                     p.connections or "-", p.max_in_flight, p.credential_fetches, done])  # fmt: skip
    header = ["backend", "N", "time", "notif/s", "requests", "new connections", "max in flight",
              "credential fetches", "rows"]  # fmt: skip
    out.append(_table(header, rows))
    out += [
        "",
        "Same worker, batch size and concurrency for each. The webhook is HTTP/1.1 (one connection per request"
        " in flight); FCM, APNs and Web Push multiplex a batch over HTTP/2. Credential fetches: FCM access"
        " tokens requested, APNs provider JWTs seen (one per drain is expected).",
        "",
    ]


def render(r: Results) -> str:
    a = r.args
    out = ["# Weave benchmarks", ""]
    out.append(
        _table(
            ["machine", ""],
            [[k, v] for k, v in r.machine.items()]
            + [["N per measurement", f"{a.n:,}"], ["run time", f"{r.total_seconds / 60:.1f} min"]],
        )
    )
    out += [
        "",
        "All runs: PostgreSQL, the notifications app's fake push provider over HTTP on loopback, real `qcluster`",
        "processes (django-q2 ORM broker, the site's `Q_CLUSTER`), backlog bulk-loaded in one transaction and",
        "timed from its commit until no row is pending. Absolute numbers are noisy on a shared 2-core machine;",
        "the ratios are measured side by side in one run.",
        "",
    ]
    targets: list[list[str]] = []

    if r.throughput:
        _section_throughput(r, out, targets)
    if r.fencing:
        _section_fencing(r, out, targets)
    if r.queries:
        _section_queries(r, out, targets)
    if r.recovery:
        _section_recovery(r, out, targets)
    if r.scaling:
        _section_scaling(r, out, targets)
    if r.backends:
        _section_backends(r, out, targets)
    if targets:
        out += ["## Targets", "", _table(["target", "value", "measured", ""], targets), ""]

    if r.profiles:
        out += ["## Profile of the hot path", ""]
        out.append(
            "pyinstrument, one in-process `drain()` (the delivery path a django-q2 worker runs), calling thread only:"
            " it runs every SQL statement; the sends run on the pool's threads."
            " Full trees: `bench/results/profile-*.txt`."
        )
        for label, (n, seconds, text) in r.profiles.items():
            rate = f"{n / seconds:,.0f}/s under the profiler" if seconds else ""
            out += ["", f"Provider latency {label}, {n:,} rows, {seconds:.1f} s ({rate}):", "", "```"]
            out += [_trim_profile(text, 32), "```"]
        out.append("")
    return "\n".join(out)


def _trim_profile(text: str, lines: int = 60) -> str:
    body = [line for line in text.splitlines() if line.strip()]
    return "\n".join(body[:lines])

"""Bench-only: what fencing costs on each backend, by CPU and statements per push, in interleaved rounds.

    BENCH_DATABASE_URL=postgres://... python bench/fencing.py [--n 400] [--pairs 15] [--json out.json]

The scenario `bench/run.py --only fencing` times whole django-q2 runs of 2,000 rows, a few pairs of
them; on a shared two-core machine one run's rate moves by more than the 5 % it should resolve. This
one measures what the guard costs instead of how long a run took, and many times over:

- each backend (webhook, FCM, APNs, Web Push, against the project's fakes, as `bench/protocols.py`
  starts them) gets `--pairs` pairs of short rounds of `--n` rows; a round is one `drain()` in this
  process (the worker's code path without django-q2 around it), fenced (the app as it is) or unfenced
  (`bench/unfenced.py`'s `guards_removed()`); each pair runs both, in alternating order (AB, BA, ...),
  and the backends take turns inside a pair, so slow spells of the machine fall on every side alike;
- per push: this process's CPU (every thread, `CLOCK_PROCESS_CPUTIME_ID`), the CPU of the bench
  database's PostgreSQL backends (`/proc/<pid>/schedstat`, nanoseconds; a backend whose connection
  closes during the round is read just before the close), the statements every thread ran and the
  rows they touched (`cursor.rowcount`: rows changed by UPDATE/INSERT/DELETE, rows returned by SELECT);
- per backend: the median of the pairs' fenced/unfenced ratios, their interquartile range and a
  bootstrap 95 % interval of that median (seeded, so a rerun on the same figures prints the same).

The statement and row counts need no timing: they are counted, not measured, and are the figures that
say exactly what the guard adds (or that it adds no statement at all).
"""

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402
from bench.product import backend_pids, group_pids, proc_cpu  # noqa: E402

BACKENDS = ("default", "fcm", "apns", "webpush")
VARIANTS = ("fenced", "unfenced")
RATIOS = ("worker_cpu_us", "postgres_cpu_us", "cpu_us", "statements", "rows", "groups", "rate")


def backend_cpu(pid: int) -> float:
    """Seconds on CPU of one (single-threaded) PostgreSQL backend, in nanosecond units from schedstat."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass
class Tally:
    """What every thread of this process sent the database during one round, and the backends' CPU."""

    statements: int = 0
    rows: int = 0  # rows changed (UPDATE/INSERT/DELETE) plus rows returned (SELECT)
    by_kind: Counter = field(default_factory=Counter)
    rows_by_kind: Counter = field(default_factory=Counter)
    closed_cpu: dict[int, float] = field(default_factory=dict)  # backend pid -> CPU read just before close


def statement_kind(sql: str) -> str:
    """A statement's verb, and for an UPDATE of the notification table which of the drain's it is."""
    verb = sql.lstrip().split(None, 1)[0].upper()
    if verb not in ("UPDATE", "WITH"):
        return verb
    if " FROM " in sql and " n." in sql:
        return "UPDATE finish"  # release_each: UPDATE ... AS n ... FROM (the rows' values)
    assigned = sql.split(" SET ", 1)[-1].split(" WHERE ", 1)[0]
    if "RETURNING" in sql:
        return "UPDATE claim"
    if assigned.count(" = ") == 1 and "lease_expires_at" in assigned:
        return "UPDATE renew"
    return "UPDATE other"


@contextmanager
def counting() -> Iterator[Tally]:
    """Count statements and rows on every connection, and read a backend's CPU before its connection closes."""
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    tally, lock = Tally(), threading.Lock()
    original_execute, original_close = CursorWrapper._execute_with_wrappers, BaseDatabaseWrapper._close

    def execute(cursor, sql, params, many, executor):
        result = original_execute(cursor, sql, params, many, executor)
        kind = statement_kind(sql)
        touched = max(0, cursor.cursor.rowcount or 0)
        with lock:
            tally.statements += 1
            tally.rows += touched
            tally.by_kind[kind] += 1
            tally.rows_by_kind[kind] += touched
        return result

    def close(db):
        # The completer thread closes its connection when the drain ends; its backend then exits, and
        # its CPU with it. Read it first.
        raw = db.connection
        pid = getattr(getattr(raw, "info", None), "backend_pid", None)
        if pid:
            with lock:
                tally.closed_cpu[pid] = backend_cpu(pid)
        return original_close(db)

    CursorWrapper._execute_with_wrappers = execute  # type: ignore[method-assign]
    BaseDatabaseWrapper._close = close  # type: ignore[method-assign]
    try:
        yield tally
    finally:
        CursorWrapper._execute_with_wrappers = original_execute  # type: ignore[method-assign]
        BaseDatabaseWrapper._close = original_close  # type: ignore[method-assign]


@dataclass
class Round:
    backend: str
    variant: str
    pair: int
    n: int
    delivered: int
    wall_s: float
    worker_cpu_us: float  # per push, this process
    postgres_cpu_us: float  # per push, the bench database's backends
    fake_cpu_us: float  # per push, the fake provider (not part of the ratio: it is the same traffic)
    statements: float  # per push
    rows: float  # per push
    groups: float  # group finishes per push (answers finished together in one UPDATE)
    claims: float  # claims per push
    by_kind: dict[str, int]
    rows_by_kind: dict[str, int]
    table: dict[str, float]  # per push: the notification table's scans, tuples and buffer hits
    load1: float

    @property
    def cpu_us(self) -> float:
        return self.worker_cpu_us + self.postgres_cpu_us

    @property
    def rate(self) -> float:
        return self.delivered / self.wall_s


TABLE_COUNTERS = (
    "seq_scan", "idx_scan", "idx_tup_fetch", "n_tup_upd", "n_tup_hot_upd", "n_tup_ins", "heap_blks_hit", "idx_blks_hit",
)  # fmt: skip


def table_counters() -> dict[str, int]:
    """The notification table's counters from pg_stat_user_tables and pg_statio_user_tables.

    A session reports its counters at most once a second unless told to flush; this one is told, and a
    backend that closed during the round reported them on exit (the short sleep lets that land).
    """
    from django.db import connection

    time.sleep(0.05)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT " + ", ".join(f"coalesce({c}, 0)" for c in TABLE_COUNTERS) + " FROM pg_stat_user_tables"
            " JOIN pg_statio_user_tables USING (relid) WHERE pg_stat_user_tables.relname = %s",
            ["weave_notifications_notification"],
        )
        return dict(zip(TABLE_COUNTERS, cursor.fetchone(), strict=True))


def one_round(backend: str, variant: str, pair: int, n: int, token: str, fakes: list[Any]) -> Round:
    from bench.unfenced import guards_removed
    from notifications.delivery import drain

    harness.load_protocol_rows(backend, n, token)
    table0 = table_counters()
    guard = guards_removed() if variant == "unfenced" else nullcontext()
    fake_pids = group_pids(fakes)
    before = {pid: backend_cpu(pid) for pid in backend_pids()}
    fake0 = sum(proc_cpu(fake_pids).values())
    with counting() as tally, guard:
        cpu0, t0 = time.process_time(), time.perf_counter()
        report = drain(enqueue_more=False, budget=600)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        after = {pid: backend_cpu(pid) for pid in backend_pids()}
    after.update({pid: max(read, after.get(pid, 0.0)) for pid, read in tally.closed_cpu.items()})
    postgres = sum(value - before.get(pid, 0.0) for pid, value in after.items())
    fake = sum(proc_cpu(fake_pids).values()) - fake0
    table = {k: (v - table0[k]) / n for k, v in table_counters().items()}
    delivered = harness.status_counts().get("delivered", 0)
    return Round(
        backend=backend, variant=variant, pair=pair, n=n, delivered=delivered, wall_s=wall,
        worker_cpu_us=cpu / n * 1e6, postgres_cpu_us=postgres / n * 1e6, fake_cpu_us=fake / n * 1e6,
        statements=tally.statements / n, rows=tally.rows / n, groups=report.groups / n, claims=report.batches / n,
        by_kind=dict(tally.by_kind), rows_by_kind=dict(tally.rows_by_kind), table=table, load1=os.getloadavg()[0],
    )  # fmt: skip


# --- the guarded statements alone ------------------------------------------------------------------


def statement_blocks(group: int, blocks: int, reps: int) -> list[dict[str, float]]:
    """The two guarded statements of a drain, alone: `renew_batch` then `release_each` over `group` rows.

    Each rep claims `group` rows (the claim is the same in both variants, so it is not measured), then
    renews and finishes them fenced or unfenced, measured: this process's CPU and its PostgreSQL
    backend's. A block is `reps` reps of each variant, in alternating order; it gives one ratio.
    """
    from django.db import connection

    from bench.unfenced import guards_removed
    from notifications.models import Notification

    harness.load_protocol_rows("default", group, "bench-device")
    connection.ensure_connection()
    backend = connection.connection.info.backend_pid  # type: ignore[union-attr]
    fields = {"last_error": "bench"}  # rows stay pending: the next rep claims the same rows again

    def rep() -> list[float]:
        batch = Notification.objects.filter(status="pending").claim_batch(owner="bench", ttl=60, limit=group)
        cpu0, pg0 = time.process_time(), backend_cpu(backend)
        Notification.objects.renew_batch(batch, ttl=60)
        cpu1, pg1 = time.process_time(), backend_cpu(backend)
        Notification.objects.release_each([(batch.lease(pk), fields) for pk in batch.fences])
        cpu2, pg2 = time.process_time(), backend_cpu(backend)
        return [cpu1 - cpu0, pg1 - pg0, cpu2 - cpu1, pg2 - pg1]

    parts = ("renew_worker", "renew_postgres", "finish_worker", "finish_postgres")
    out = []
    for block in range(blocks + 1):
        spent = {variant: [0.0] * len(parts) for variant in VARIANTS}
        for variant in VARIANTS if block % 2 == 0 else VARIANTS[::-1]:
            with guards_removed() if variant == "unfenced" else nullcontext():
                for _ in range(reps):
                    spent[variant] = [a + b for a, b in zip(spent[variant], rep(), strict=True)]
        if block == 0:
            continue  # warm-up
        per_row = 1e6 / (reps * group)
        row = {f"{v}_{part}_us": spent[v][i] * per_row for v in VARIANTS for i, part in enumerate(parts)}
        for name, idx in (("renew", (0, 1)), ("finish", (2, 3)), ("both", (0, 1, 2, 3))):
            row[f"{name}_ratio"] = sum(spent["fenced"][i] for i in idx) / sum(spent["unfenced"][i] for i in idx)
        row["load1"] = os.getloadavg()[0]
        out.append(row)
    return out


def render_statements(group: int, blocks: list[dict[str, float]]) -> str:
    med = {k: statistics.median(b[k] for b in blocks) for k in blocks[0]}
    lines = [f"the guarded statements alone, {group} rows a statement, {len(blocks)} blocks, per row (median):"]
    for name in ("renew", "finish"):
        ratios = [b[f"{name}_ratio"] for b in blocks]
        q1, q3 = quartiles(ratios)
        low, high = bootstrap_median(ratios)
        fenced = [med[f"fenced_{name}_{side}_us"] for side in ("worker", "postgres")]
        unfenced = [med[f"unfenced_{name}_{side}_us"] for side in ("worker", "postgres")]
        lines.append(
            f"  {name:<6} fenced {fenced[0]:.2f} + {fenced[1]:.2f} us (worker + PostgreSQL), unfenced {unfenced[0]:.2f}"
            f" + {unfenced[1]:.2f} us: the guard adds {sum(fenced) - sum(unfenced):.2f} us a row;"
            f" ratio {statistics.median(ratios):.3f} [{q1:.3f}, {q3:.3f}] ({low:.3f}, {high:.3f})"
        )
    loads = [b["load1"] for b in blocks]
    lines.append(f"  load average (1 min) {min(loads):.2f} to {max(loads):.2f}")
    return "\n".join(lines)


def guard_bound(statements: dict[str, list[dict[str, float]]], rounds: list[dict[str, Any]]) -> list[str]:
    """Fencing's share of a push's CPU, bounded: the finish guard's cost per statement times finishes per push.

    In these drains the finish is the only guarded statement that runs (the claim is the same in both
    variants; no renewal or release runs: the statement counts show it), so the guard's cost per push
    is its extra per finish statement (upper end of the 95 % interval, from the statements alone, at
    the group size nearest the drain's) times the finish statements per push (counted), over the
    fenced round's CPU per push (worker + PostgreSQL).
    """
    per_statement: dict[int, float] = {}
    for size, blocks in statements.items():
        ratios = [b["finish_ratio"] for b in blocks]
        unfenced = statistics.median(b["unfenced_finish_worker_us"] + b["unfenced_finish_postgres_us"] for b in blocks)
        per_statement[int(size)] = (bootstrap_median(ratios)[1] - 1) * unfenced * int(size)
    lines = []
    for backend in dict.fromkeys(r["backend"] for r in rounds):
        fenced = [r for r in rounds if r["backend"] == backend and r["variant"] == "fenced"]
        finishes = statistics.median(r["by_kind"].get("UPDATE finish", 0) / r["n"] for r in fenced)
        cpu = statistics.median(r["cpu_us"] for r in fenced)
        size = min(per_statement, key=lambda g: abs(g - 1 / finishes))
        extra = finishes * per_statement[size]
        lines.append(
            f"{backend:<8} {finishes:.4f} finishes a push ({1 / finishes:.1f} rows each), at most"
            f" {per_statement[size]:.0f} us each ({size}-row figure): {extra:.1f} us of {cpu:.0f} us a push,"
            f" at most {100 * extra / cpu:.2f} %"
        )
    return lines


# --- statistics ----------------------------------------------------------------------------------


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def bootstrap_median(values: Sequence[float], *, resamples: int = 4000, seed: int = 6) -> tuple[float, float]:
    """A percentile bootstrap 95 % interval of the median (seeded: the same figures give the same interval)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def pair_ratios(rounds: list[Round], backend: str | None, metric: str) -> list[float]:
    """fenced / unfenced of `metric`, one ratio per pair (per backend and pair when `backend` is None)."""
    cells: dict[tuple[str, int], dict[str, Round]] = {}
    for r in rounds:
        if backend is None or r.backend == backend:
            cells.setdefault((r.backend, r.pair), {})[r.variant] = r
    out = []
    for cell in cells.values():
        if len(cell) == 2:
            fenced, unfenced = (getattr(cell[v], metric) for v in VARIANTS)
            if unfenced:
                out.append(fenced / unfenced)
    return out


def verdict(low: float, high: float, limit: float = 1.05) -> str:
    """For a cost ratio (fenced over unfenced, higher is costlier) against `limit`."""
    if high <= limit:
        return "met"
    if low > limit:
        return "missed"
    return "not resolved"


def summarise(rounds: list[Round]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for backend in (*BACKENDS, None):
        name = backend or "all backends"
        entry: dict[str, Any] = {}
        for metric in RATIOS:
            ratios = pair_ratios(rounds, backend, metric)
            if not ratios:
                continue
            q1, q3 = quartiles(ratios)
            low, high = bootstrap_median(ratios)
            entry[metric] = {
                "pairs": len(ratios), "median": statistics.median(ratios), "iqr": [q1, q3], "ci95": [low, high],
            }  # fmt: skip
        for variant in VARIANTS:
            mine = [r for r in rounds if r.variant == variant and (backend is None or r.backend == backend)]
            if mine:
                entry[variant] = {m: statistics.median(getattr(r, m) for r in mine) for m in (*RATIOS, "fake_cpu_us")}
        if entry:
            summary[name] = entry
    return summary


# --- the run -------------------------------------------------------------------------------------


def run(n: int, pairs: int, backends: Sequence[str], progress: Callable[[Round], None]) -> list[Round]:
    from django.conf import settings

    from bench.protocols import _start_fakes

    rounds: list[Round] = []
    with harness.bench() as bench:
        provider = bench.start_provider(0)
        child, configured, tokens, _ = _start_fakes(bench, 0)
        tokens["default"] = "bench-device"
        fakes = {"default": [provider.child]} | {alias: [child] for alias in ("fcm", "apns", "webpush")}
        previous = getattr(settings, "WEAVE", {})
        # The fakes listen on loopback, which the Web Push destination policy refuses unless told otherwise.
        settings.WEAVE = {**previous, "PUSH_URL": provider.push_url, "PUSH_TIMEOUT": 10.0, "PUSH_BACKENDS": configured,
                          "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True}  # fmt: skip
        try:
            for backend in backends:  # one unrecorded round each: connections, TLS, imports, plans warm
                for variant in VARIANTS:
                    one_round(backend, variant, -1, min(n, 100), tokens[backend], fakes[backend])
            for pair in range(pairs):
                order = VARIANTS if pair % 2 == 0 else VARIANTS[::-1]
                turn = list(backends[pair % len(backends) :]) + list(backends[: pair % len(backends)])
                for backend in turn:
                    for variant in order:
                        r = one_round(backend, variant, pair, n, tokens[backend], fakes[backend])
                        rounds.append(r)
                        progress(r)
        finally:
            settings.WEAVE = previous
    return rounds


def render(summary: dict[str, Any], rounds: list[Round]) -> str:
    lines = [
        "fenced / unfenced, median of pairs [interquartile range] (bootstrap 95 % interval of the median)",
        f"{'backend':<13} {'metric':<16} {'fenced':>9} {'unfenced':>9}   ratio",
    ]
    for name, entry in summary.items():
        for metric in RATIOS:
            if metric not in entry:
                continue
            s = entry[metric]
            ratio = (
                f"{s['median']:.3f} [{s['iqr'][0]:.3f}, {s['iqr'][1]:.3f}] "
                f"({s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}), {s['pairs']} pairs"
            )
            if metric in ("cpu_us", "worker_cpu_us", "postgres_cpu_us"):
                ratio += f"  5 %: {verdict(*s['ci95'])}"
            fenced = entry.get("fenced", {}).get(metric, float("nan"))
            unfenced = entry.get("unfenced", {}).get(metric, float("nan"))
            lines.append(f"{name:<13} {metric:<16} {fenced:>9.2f} {unfenced:>9.2f}   {ratio}")
    loads = [r.load1 for r in rounds]
    lines.append(f"load average (1 min) during the rounds: {min(loads):.2f} to {max(loads):.2f}")
    kinds: dict[tuple[str, str], Counter] = {}
    for r in rounds:
        kinds.setdefault((r.backend, r.variant), Counter()).update(r.by_kind)
    for (backend, variant), counter in sorted(kinds.items()):
        per = sum(1 for r in rounds if r.backend == backend and r.variant == variant)
        lines.append(f"statements per round, {backend} {variant}: " + ", ".join(
            f"{k} {v / per:.1f}" for k, v in sorted(counter.items())
        ))  # fmt: skip
    for backend in dict.fromkeys(r.backend for r in rounds):
        for variant in VARIANTS:
            mine = [r for r in rounds if r.backend == backend and r.variant == variant]
            lines.append(f"notification table per push, {backend} {variant} (median): " + ", ".join(
                f"{k} {statistics.median(r.table[k] for r in mine):.3f}" for k in TABLE_COUNTERS
            ))  # fmt: skip
    return "\n".join(lines)


def _progress(r: Round) -> None:
    print(
        f"pair {r.pair:>2} {r.backend:<8} {r.variant:<8} {r.rate:>6,.0f}/s  {r.delivered}/{r.n}"
        f"  worker {r.worker_cpu_us:>6.0f} us  postgres {r.postgres_cpu_us:>5.0f} us"
        f"  statements {r.statements:.3f}  rows {r.rows:.3f}  load {r.load1:.2f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400, help="rows per round")
    parser.add_argument("--pairs", type=int, default=15, help="fenced/unfenced pairs per backend")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--json", type=Path, default=None, help="write every round and the summary here")
    parser.add_argument("--statements", default="", help="group sizes: time the guarded statements alone, then exit")
    parser.add_argument("--blocks", type=int, default=30, help="--statements: blocks (one ratio each)")
    parser.add_argument("--reps", type=int, default=20, help="--statements: reps of each variant per block")
    parser.add_argument(
        "--bound", nargs=2, type=Path, metavar=("STATEMENTS_JSON", "ROUNDS_JSON"),
        help="print the guard's bounded share of a push's CPU from two earlier --json files, then exit",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.bound:
        statements, rounds = (json.loads(path.read_text()) for path in args.bound)
        print("\n".join(guard_bound(statements, rounds["rounds"])))
        return 0
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    harness.configure()
    import logging

    logging.getLogger("django-q").setLevel(logging.WARNING)
    if args.statements:
        found = {}
        for group in (int(g) for g in args.statements.split(",")):
            found[group] = statement_blocks(group, args.blocks, args.reps)
            print(render_statements(group, found[group]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(found, indent=2))
        return 0
    rounds = run(args.n, args.pairs, backends, _progress)
    short = [r for r in rounds if r.delivered != r.n]
    if short:
        print(f"WARNING: {len(short)} rounds delivered fewer than all rows", flush=True)
    summary = summarise(rounds)
    print()
    print(render(summary, rounds))
    if args.json:
        rows = [asdict(r) | {"cpu_us": r.cpu_us, "rate": r.rate} for r in rounds]
        args.json.write_text(json.dumps({"summary": summary, "rounds": rows}, indent=2))
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())

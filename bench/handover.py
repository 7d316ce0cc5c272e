"""Bench-only: the hand-over cost of a push in the caller's process (wall time, CPU and round trips per notification).

    BENCH_DATABASE_URL=postgres://... python bench/handover.py --n 500 --rounds 3
    BENCH_DATABASE_URL=postgres://... python bench/handover.py --n 500 --profile "send_to_user, one at a time"

Two services, `notification_create` (a raw token) and `notification_send_to_user` (a user with one
registered device), each one at a time (every call its own transaction, as a view sending one push
does) and in bulk (N calls in one transaction). No cluster runs: what is measured is the caller's
share only (validation, the INSERT, the device check, the coalesced drain request at commit, the
broker's enqueue when that request wins). The modes are interleaved over `--rounds` so a burst of
load on the shared machine lands on all of them alike; the median round is reported.

Round trips are counted, not timed: every statement Django sends, plus one BEGIN and one COMMIT per
transaction (psycopg sends BEGIN as a statement of its own). CPU is read from /proc: this process's
and its connection's PostgreSQL backend's (the server runs on this machine).
"""

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402
from tools.processes import process_cpu as proc_cpu  # noqa: E402

TARGET_MS = 0.5


class RoundTrips:
    """Count what goes to the database: statements through Django, plus BEGIN and COMMIT per transaction."""

    def __init__(self) -> None:
        self.statements = 0
        self.transactions = 0
        self.by_kind: dict[str, int] = {}

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        self.statements += 1
        kind = sql.lstrip().split(None, 1)[0].upper()
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        return execute(sql, params, many, context)

    @property
    def total(self) -> int:
        return self.statements + 2 * self.transactions


@contextmanager
def counting() -> Iterator[RoundTrips]:
    from django.db import connection

    trips = RoundTrips()
    original = connection._commit  # type: ignore[attr-defined]

    def commit() -> Any:
        trips.transactions += 1
        return original()

    connection._commit = commit  # type: ignore[attr-defined]
    try:
        with connection.execute_wrapper(trips):
            yield trips
    finally:
        del connection._commit  # type: ignore[attr-defined]


def users(n: int) -> list[Any]:
    """N users with one active device each on the default backend (made once per round, before timing)."""
    from django.contrib.auth import get_user_model

    from notifications.models import Device

    User = get_user_model()
    Device.objects.all().delete()
    User.objects.filter(username__startswith="handover-").delete()
    made = User.objects.bulk_create([User(username=f"handover-{i}") for i in range(n)])
    if made and made[0].pk is None:
        made = list(User.objects.filter(username__startswith="handover-").order_by("pk"))
    Device.objects.bulk_create([Device(user=u, backend="default", token=f"hd-{u.pk}") for u in made])
    return made


def run_mode(name: str, n: int, profiler: cProfile.Profile | None = None) -> dict[str, float]:
    from django.db import transaction

    from bench.product import reset
    from notifications.models import Notification
    from notifications.services import notification_create, notification_send_to_user

    reset()
    service, mode = name.split(", ")
    people = users(n) if service == "send_to_user" else []

    def one(i: int) -> None:
        if service == "create":
            notification_create(device_token=f"h-{i}", title="hand-over", body="")
        else:
            notification_send_to_user(user=people[i], title="hand-over", body="")

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        server = cursor.fetchone()[0]  # this connection's PostgreSQL backend (same machine)
    with counting() as trips:
        cpu, server_cpu, started = proc_cpu(), proc_cpu(server), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        if mode == "bulk":
            with transaction.atomic():
                for i in range(n):
                    one(i)
        else:
            for i in range(n):
                one(i)
        if profiler is not None:
            profiler.disable()
        wall, cpu, server_cpu = time.perf_counter() - started, proc_cpu() - cpu, proc_cpu(server) - server_cpu
    made = Notification.objects.count()
    assert made == n, f"{name}: {made} notifications for {n} calls"
    return {
        "ms": wall / n * 1000,
        "cpu_ms": cpu / n * 1000,
        "server_ms": server_cpu / n * 1000,
        "trips": trips.total / n,
        "kinds": trips.by_kind,  # type: ignore[dict-item]
    }


def floor(n: int) -> dict[str, float]:
    """What the machine gives at this moment, through the same Django connection: a bare round trip
    (`SELECT 1`) and a bare committed one-row INSERT (the commit waits for the WAL flush, as a push's does)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS handover_floor (x int)")
        started = time.perf_counter()
        for _ in range(n):
            cursor.execute("SELECT 1")
        select = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(n):
            cursor.execute("INSERT INTO handover_floor VALUES (1)")
        insert = time.perf_counter() - started
        cursor.execute("DROP TABLE handover_floor")
    return {"select_ms": select / n * 1000, "insert_ms": insert / n * 1000}


MODES = ("create, one at a time", "create, bulk", "send_to_user, one at a time", "send_to_user, bulk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-free mode name to run alone, e.g. 'create, bulk'")
    parser.add_argument("--profile", default="", help="a mode to profile with cProfile (its top functions)")
    args = parser.parse_args()
    harness.configure()
    from django.db import connection

    connection.ensure_connection()
    modes = [args.only] if args.only else list(MODES)
    if args.profile:
        profiler = cProfile.Profile()
        run_mode(args.profile, args.n)  # warm: imports, caches, the first drain request
        run_mode(args.profile, args.n, profiler)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
        print(out.getvalue())
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
        return
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    floors: list[dict[str, float]] = []
    run_mode(modes[0], min(args.n, 50))  # warm-up, not reported
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        floors.append(floor(args.n))
        for mode in modes:
            results[mode].append(run_mode(mode, args.n))
            load.append(os.getloadavg()[0])
    print(
        f"n={args.n} rounds={args.rounds} load average (1 min) {min(load):.2f} to {max(load):.2f}; "
        f"target <= {TARGET_MS} ms"
    )
    print(
        f"{'floor':28} a bare round trip {statistics.median(f['select_ms'] for f in floors):.3f} ms, "
        f"a bare committed INSERT {statistics.median(f['insert_ms'] for f in floors):.3f} ms (same connection)"
    )
    for mode, runs in results.items():
        ms = statistics.median(r["ms"] for r in runs)
        cpu = statistics.median(r["cpu_ms"] for r in runs)
        server = statistics.median(r["server_ms"] for r in runs)
        each = " ".join(f"{r['ms']:.3f}" for r in runs)
        kinds = ", ".join(f"{k} {v / args.n:.2f}" for k, v in sorted(runs[-1]["kinds"].items()))  # type: ignore[union-attr]
        print(
            f"{mode:28} {ms:7.3f} ms wall (rounds: {each}), CPU {cpu:.3f} ms here and {server:.3f} ms in PostgreSQL, "
            f"{runs[-1]['trips']:.2f} round trips per notification ({kinds})",
            flush=True,
        )


if __name__ == "__main__":
    main()

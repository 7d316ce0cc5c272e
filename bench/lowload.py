"""Bench-only: created -> delivered at low load on the product path, Weave beside a tuned Celery, one run.

    BENCH_DATABASE_URL=postgres://... python bench/lowload.py [--rate 200] [--seconds 5] [--latency 50]

A steady stream of `notification_create` calls (each its own transaction) into real `qcluster`
processes (2 workers, the ORM broker), then the same stream of Celery tasks (2 x 20 threads, Redis,
reused connections); `bench/product.py`'s `run_weave` / `run_celery` in stream mode. Prints p50 and
p99 of created -> delivered for each, and the seconds the stream took (the machine may create rows slower than asked).
For Weave it also prints where the time went (`timeline`): created -> sent (the attempt's start) -> finished
(its receipt; and that less the backend's own measure of the exchange), how many drains (attempt owners)
delivered the stream, and how late the slowest rows were created in the stream (the first rows wait for the
first drain to start).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402
from bench.product import percentile, run_celery, run_weave  # noqa: E402


def timeline() -> str:
    """Percentiles of created -> sent -> finished of the delivered attempts, and the drains that sent them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXTRACT(EPOCH FROM a.started_at - n.created_at), EXTRACT(EPOCH FROM a.finished_at - a.started_at), "
            "EXTRACT(EPOCH FROM n.delivered_at - n.created_at), "
            "EXTRACT(EPOCH FROM n.created_at - min(n.created_at) OVER ()), a.owner, "
            "EXTRACT(EPOCH FROM a.finished_at - a.started_at) - a.latency_ms / 1000.0 "
            "FROM weave_notifications_deliveryattempt a JOIN weave_notifications_notification n "
            "ON n.id = a.notification_id WHERE a.outcome = 'delivered'"
        )
        rows = cursor.fetchall()
    if not rows:
        return "   timeline: no delivered attempts"
    sent, finished, total = ([float(r[i]) for r in rows] for i in range(3))
    # The backend's own measure of the exchange (request written -> answer read) taken out of sent -> finished:
    # the hand-offs around it (loop, worker thread, completer, the finish's statement).
    around = [float(r[5]) for r in rows if r[5] is not None]
    slow = sorted((float(r[2]), float(r[3])) for r in rows)[-max(1, len(rows) // 100) :]

    def q(values: list[float]) -> str:
        return f"p50 {percentile(values, 0.5):.3f} p90 {percentile(values, 0.9):.3f} p99 {percentile(values, 0.99):.3f}"

    return (
        f"   timeline: created->sent {q(sent)}; sent->finished {q(finished)} (of which outside the exchange "
        f"{q(around)}); created->delivered {q(total)}; "
        f"{len({r[4] for r in rows})} drains; slowest 1% created at {min(c for _, c in slow):.2f} to "
        f"{max(c for _, c in slow):.2f} s into the stream"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--latency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    harness.configure()
    n = int(args.rate * args.seconds)
    with harness.bench() as run:
        run.start_provider(args.latency)
        for _ in range(args.rounds):
            weave = run_weave(run, n=n, mode="stream", rate=args.rate)
            print(timeline(), flush=True)  # read before the Celery run resets the tables
            for result in (weave, run_celery(run, n=n, mode="stream", rate=args.rate, reuse=True)):
                print(
                    f"{result.system:<16} n={len(result.lat)} unique={result.unique} over {result.seconds:.1f} s  "
                    f"p50 {percentile(result.lat, 0.5):.3f} s  p99 {percentile(result.lat, 0.99):.3f} s",
                    flush=True,
                )


if __name__ == "__main__":
    main()

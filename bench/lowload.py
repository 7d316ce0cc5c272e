"""Bench-only: created -> delivered at low load on the product path, Weave beside a tuned Celery, one run.

    BENCH_DATABASE_URL=postgres://... python bench/lowload.py [--rate 200] [--seconds 5] [--latency 50]

A steady stream of `notification_create` calls (each its own transaction) into real `qcluster`
processes (2 workers, the ORM broker), then the same stream of Celery tasks (2 x 20 threads, Redis,
reused connections); `bench/product.py`'s `run_weave` / `run_celery` in stream mode. Prints p50 and
p99 of created -> delivered for each, and the seconds the stream took (the machine may create rows slower than asked).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402
from bench.product import percentile, run_celery, run_weave  # noqa: E402


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
            for result in (
                run_weave(run, n=n, mode="stream", rate=args.rate),
                run_celery(run, n=n, mode="stream", rate=args.rate, reuse=True),
            ):
                print(
                    f"{result.system:<16} n={len(result.lat)} unique={result.unique} over {result.seconds:.1f} s  "
                    f"p50 {percentile(result.lat, 0.5):.3f} s  p99 {percentile(result.lat, 0.99):.3f} s",
                    flush=True,
                )


if __name__ == "__main__":
    main()

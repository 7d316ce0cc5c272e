"""Bench-only: the webhook through `qcluster` beside a tuned Celery, in interleaved rounds.

    BENCH_DATABASE_URL=postgres://... python bench/webhook_celery.py --rounds 4 --n 3000 [--latency 0]

The 0 ms pair of `bench/product.py --only throughput` on its own, repeated: one fake provider, then per
round Weave (a bulk `notification_create`, real `qcluster`, 2 workers) and the tuned Celery of
`bench/celery_app.py` (2 processes x 20 threads, Redis broker), the order alternating from round to
round so that neither always runs on the warmer or quieter machine. Each run is checked as product.py
checks it (unique deliveries = delivered = N); CPU per 1,000 pushes comes from the same meter. On a
shared machine the rates move together with its load, so each round's own ratio is printed.
"""

import argparse
import logging
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness, product  # noqa: E402

GROUPS = ("workers", "postgres", "provider")


def describe(run: product.Run) -> str:
    cpu = "  ".join(f"{group} {run.per_1000(group):.2f}" for group in GROUPS)
    return f"{run.system:<14} {run.rate:>7,.0f}/s  CPU s/1000: {cpu}  unique {run.unique} delivered {run.delivered}"


def one_round(bench: harness.Bench, index: int, n: int) -> dict[str, product.Run]:
    order = ("weave", "celery") if index % 2 == 0 else ("celery", "weave")
    runs: dict[str, product.Run] = {}
    for system in order:
        if system == "weave":
            runs[system] = product.run_weave(bench, n=n, mode="bulk", rate=0.0)
        else:
            runs[system] = product.run_celery(bench, n=n, mode="bulk", rate=0.0, reuse=True)
    ratio = runs["weave"].rate / runs["celery"].rate
    print(f"round {index + 1} (order {' then '.join(order)}, load average {os.getloadavg()[0]:.2f})")
    for system in ("weave", "celery"):
        print("  " + describe(runs[system]))
    print(f"  webhook / tuned Celery: {ratio:.2f}", flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--n", type=int, default=3000, help="pushes per run")
    parser.add_argument("--latency", type=int, default=0, help="the fake provider's latency in ms")
    args = parser.parse_args(argv)
    harness.configure()
    logging.getLogger("django-q").setLevel(logging.WARNING)
    with harness.bench() as bench:
        bench.start_provider(args.latency)
        rounds = [one_round(bench, i, args.n) for i in range(args.rounds)]
    ratios = [r["weave"].rate / r["celery"].rate for r in rounds]
    weave = statistics.median(r["weave"].rate for r in rounds)
    celery = statistics.median(r["celery"].rate for r in rounds)
    print(f"\nmedians: weave {weave:,.0f}/s, tuned Celery {celery:,.0f}/s, ratio of the medians {weave / celery:.2f}")
    print(f"each round's ratio: {', '.join(f'{ratio:.2f}' for ratio in ratios)}")
    for group in GROUPS:
        mine = statistics.median(r["weave"].per_1000(group) for r in rounds)
        theirs = statistics.median(r["celery"].per_1000(group) for r in rounds)
        print(f"median {group} CPU s/1000: weave {mine:.2f}, tuned Celery {theirs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

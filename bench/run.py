"""Run the Weave benchmarks (issue 6), print the table and write it to bench/results/<date>.md.

    python bench/run.py                      # everything, N = 5,000 per scenario
    python bench/run.py --quick              # a smoke run: small N, short runs
    python bench/run.py --only throughput,queries --n 2000

It needs the local PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/weave_bench);
the bench database is created and migrated on first use.
"""

import argparse
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

# Run as a script from anywhere: the project root must be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402

SCENARIOS = ("throughput", "fencing", "queries", "recovery", "scaling", "profile", "backends")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=None, help="notifications per measurement (default 5000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: N=300, one repeat, short TTLs")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(SCENARIOS)}")
    parser.add_argument("--workers", type=int, default=2, help="W for the throughput and fencing scenarios")
    parser.add_argument("--repeats", type=int, default=None, help="fenced/unfenced pairs (default 2, quick 1)")
    parser.add_argument(
        "--ttls", default=None, help="lease TTLs for recovery, seconds (default 15,30: above PUSH_TIMEOUT)"
    )
    parser.add_argument("--out", type=Path, default=None, help="results file (default bench/results/<date>.md)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--drop", action="store_true", help="drop the bench database and exit")
    args = parser.parse_args(argv)
    args.n = args.n or (300 if args.quick else 5000)
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.ttls = [float(t) for t in (args.ttls or ("12,15" if args.quick else "15,30")).split(",")]
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    args.scenarios = [s for s in SCENARIOS if s in chosen]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (e.g. `timeout`) must unwind like Ctrl-C, so the provider and clusters are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.drop:
        harness.drop_database()
        print("Dropped the bench database.")
        return 0
    harness.configure()
    import logging

    # The bench process enqueues thousands of tasks; django-q2 logs each one at INFO.
    logging.getLogger("django-q").setLevel(logging.WARNING)

    from bench import report, scenarios

    started = time.monotonic()
    results = report.Results(args=args, machine=report.machine_info())
    for name in args.scenarios:
        print(f"== {name}", flush=True)
        t = time.monotonic()
        getattr(scenarios, f"scenario_{name}")(results, args)
        print(f"   ({time.monotonic() - t:.0f} s)", flush=True)
    results.total_seconds = time.monotonic() - started
    text = report.render(results)
    print()
    print(text)
    if not args.no_write:
        out = (args.out or harness.PROJECT_ROOT / "bench" / "results" / f"{datetime.now(UTC):%Y-%m-%d}.md").resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"Wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The latency and recovery figures the real-process tests measure but never assert, against their targets.

    python bench/timings.py                  # the wake and partition tests on PostgreSQL, then the table
    python bench/timings.py --runs 3         # three runs: each figure's worst and median

Tests prove behaviour (a retry went out, by the watcher, never before its due time; another worker
finished a killed worker's rows, never before its lease ran out). How soon is a performance claim
that a loaded machine would turn into a flaky test, so the tests only report it (`tests/timings.py`)
and this script prints it: the push and onboarding retries after their due time (target 1 s), a
SIGKILLed worker's rows finished (target TTL + 3 s), and recovery after a silent network partition
(target TTL + 5 s after the cut-off worker's lease could expire).

It needs the local PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/weave_bench)
and Redis on 127.0.0.1:6379 (the wake tests' Redis broker case). The exit status is pytest's; a figure
above its target is printed as such, not turned into a failure: it is a measurement.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/e2e/test_wake.py", "tests/partitions"]


def run(database_url: str, timings: Path) -> int:
    env = {**os.environ, "DATABASE_URL": database_url, "WEAVE_TIMINGS_FILE": str(timings), "DEBUG": "true"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


def table(lines: list[dict]) -> str:
    by_name: dict[str, list[dict]] = {}
    for line in lines:
        by_name.setdefault(line["name"], []).append(line)
    rows = [
        "| figure | samples | median (s) | worst (s) | target (s) | met |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, samples in by_name.items():
        values = [s["seconds"] for s in samples]
        target = max(s["target"] for s in samples)
        worst = max(values)
        met = "yes" if worst <= target else "no"
        rows.append(f"| {name} | {len(values)} | {statistics.median(values):.3f} | {worst:.3f} | {target:g} | {met} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="how many times to run the tests (default 1)")
    args = parser.parse_args(argv)
    url = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/weave_bench")
    status = 0
    with tempfile.TemporaryDirectory() as scratch:
        timings = Path(scratch) / "timings.jsonl"
        for _ in range(max(1, args.runs)):
            status = run(url, timings) or status
        lines = [json.loads(line) for line in timings.read_text().splitlines()] if timings.exists() else []
    print(table(lines) if lines else "No figures were reported (did the PostgreSQL tests run?).")
    return status


if __name__ == "__main__":
    sys.exit(main())

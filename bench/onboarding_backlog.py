"""A backlog of onboarding runs through `qcluster`, two code trees side by side in one run.

    python bench/onboarding_backlog.py --trees /path/to/before,/path/to/after --runs 40 --rounds 3

Each round starts one `qcluster` with 2 workers against the fake supplier services, starts `--runs`
runs at once through `onboarding_start` (as the admin action does), and makes every run's first
request answer 503 with Retry-After 1, so each run is released once and is due again a second
later. It reports, per tree (medians over the rounds): the wall time until every run completed,
how long each run waited for its first claim, and how late each second attempt started against its
due time (database clock). Rounds alternate between the trees, so machine noise falls on both.

A tree is a checkout of this project; the script runs itself there (`--one`) with this Python.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def one_round(runs: int, timeout: float) -> dict[str, float]:
    """Run one round in this tree; return its measurements."""
    from bench import harness

    harness.configure()
    import httpx

    from bench.product import CpuMeter, _services_command, _up, onboarding_waits, reset
    from onboarding.models import OnboardingRun, Supplier
    from onboarding.services import onboarding_start
    from onboarding.testing.numbers import german_iban, german_vat_number
    from tools.processes import wait_until

    with harness.bench() as run:
        run.start_provider(0)  # the clusters need a push URL; the welcome pushes go there
        services = run.groups.start("supplier-services", _services_command(port := harness.free_port()))
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _up(url, services), timeout=30, message="the fake supplier services")
        reset()
        httpx.post(f"{url}/_config", json={"fail_first": runs, "retry_after": 1}, timeout=30)
        cluster = run.start_cluster(workers=2, supplier_api_url=url, onboarding_step_retries=0)
        assert run.provider is not None
        meter = CpuMeter.of_cluster([cluster], run.provider.child)
        suppliers = [
            Supplier.objects.create(
                legal_name=f"Backlog {i} GmbH",
                country="DE",
                tax_id=german_vat_number(2000 + i),
                contact_email=f"b{i}@bench.example",
                iban=german_iban(2000 + i),
            )
            for i in range(runs)
        ]
        meter.start()
        began = time.monotonic()
        ids = [onboarding_start(supplier=supplier).pk for supplier in suppliers]
        active = OnboardingRun.objects.filter(pk__in=ids).exclude(status="completed")
        deadline = began + timeout
        while active.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        wall = time.monotonic() - began
        meter.stop()
        left = active.count()
        run.stop_clusters()
    late, first_claim = onboarding_waits(ids)
    return {
        "wall_s": wall,
        "not_completed": left,
        "first_claim_p50": statistics.median(first_claim),
        "first_claim_max": max(first_claim),
        "late_p50": statistics.median(late) if late else float("nan"),
        "late_max": max(late) if late else float("nan"),
        # Per run: the cluster's processes, and the bench database's backends (the site's own, starting
        # the runs, left out).
        "worker_cpu_ms": 1000 * meter.used["workers"] / runs,
        "postgres_cpu_ms": 1000 * meter.used["postgres"] / runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default="", help="comma-separated checkouts to compare (default: this one)")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--one", action="store_true", help="one round in this tree; print JSON")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_round(args.runs, args.timeout)))
        return
    trees = [Path(t).resolve() for t in args.trees.split(",") if t] or [Path(__file__).resolve().parents[1]]
    results: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    for number in range(args.rounds):
        for tree in trees:
            command = [sys.executable, "bench/onboarding_backlog.py", "--one", "--runs", str(args.runs)]
            done = subprocess.run([*command, "--timeout", str(args.timeout)], cwd=tree, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{tree}: round {number + 1} failed:\n{done.stderr[-3000:]}")
            results[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(tree.name, number + 1, results[tree][-1], flush=True)
    report(results, args)


def report(results: dict[Path, list[dict[str, float]]], args: argparse.Namespace) -> None:
    keys = (
        "wall_s",
        "not_completed",
        "first_claim_p50",
        "first_claim_max",
        "late_p50",
        "late_max",
        "worker_cpu_ms",
        "postgres_cpu_ms",
    )
    lines = [
        f"# Onboarding backlog, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`bench/onboarding_backlog.py --runs {args.runs} --rounds {args.rounds}`: one `qcluster` with 2 workers,"
        f" {args.runs} runs started at once, each released once on a 503 with Retry-After 1. Medians over the rounds;"
        " times in seconds, CPU in ms per run.",
        "",
        "| tree | " + " | ".join(keys) + " |",
        "| --- | " + " | ".join("---" for _ in keys) + " |",
    ]
    medians = {
        tree: {key: statistics.median(r[key] for r in rounds) for key in keys} for tree, rounds in results.items()
    }
    for tree, row in medians.items():
        lines.append(f"| `{tree.name}` | " + " | ".join(f"{row[key]:.2f}" for key in keys) + " |")
    if len(medians) == 2:
        (first, a), (second, b) = medians.items()
        ratios = [f"{b[key] / a[key]:.2f}" if a[key] else "-" for key in keys]
        lines.append(f"| `{second.name}` / `{first.name}` | " + " | ".join(ratios) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

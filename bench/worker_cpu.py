"""Bench-only: one push worker's CPU per 1,000 deliveries, in-process, with an optional profile.

    DATABASE_URL=postgres://... WEAVE_PUSH_URL=http://127.0.0.1:8177/push \\
        python bench/worker_cpu.py --n 2000 [--profile]

Loads N due notifications, runs one `drain()` on this process (the provider runs in its own process,
so its CPU is not counted), and prints wall time, throughput and this process's CPU (every thread:
the database thread and the sending threads or loop) per 1,000 delivered pushes. The site's log
level stays as configured (INFO by default) and its output goes to /dev/null, so formatting is paid.
`--profile` adds a yappi CPU profile of all threads, grouped by where the time goes.
"""

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from notifications.models import DeliveryAttempt, Notification  # noqa: E402
from weave.leases import DbNow  # noqa: E402

GROUPS = [
    ("lease core group SQL (weave.leases)", ("weave/leases",)),
    ("Django ORM build/compile", ("django/db/models", "django/db/backends/utils", "django/db/backends/base")),
    ("psycopg", ("psycopg",)),
    ("httpx/httpcore/h11/h2", ("httpx", "httpcore", "h11", "h2/", "hpack")),
    ("asyncio", ("asyncio",)),
    ("worker + backend code (notifications)", ("notifications/",)),
    ("logging", ("logging/", "weave/events")),
    ("sanitize/retry", ("weave/sanitize", "weave/retry")),
    ("threads/queues (concurrent.futures, queue, threading)", ("concurrent/futures", "queue.py", "threading.py")),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="yappi CPU profile (slows the run several-fold)")
    parser.add_argument("--sample", action="store_true", help="cProfile (CPU clock) of the worker's thread")
    parser.add_argument("--split", action="store_true", help="CPU split: sending loop / finish / claim / rest")
    args = parser.parse_args()
    settings.DEBUG = False  # no query log: a production worker keeps none
    call_command("migrate", verbosity=0)
    DeliveryAttempt.objects.all().delete()
    Notification.objects.all().delete()
    Notification.objects.bulk_create(
        Notification(device_token=f"device-{i:06d}", title=f"Hello {i}", body="A message from Weave.", data={"i": i})
        for i in range(args.n)
    )
    Notification.objects.update(next_attempt_at=DbNow())
    from notifications.delivery import drain

    options = {"enqueue_more": False, "budget": 600}
    if args.concurrency:
        options["concurrency"] = args.concurrency
    if args.batch_size:
        options["batch_size"] = args.batch_size
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the log's cost is paid, its output dropped
    for handler in [h for name in ("weave", "") for h in __import__("logging").getLogger(name).handlers]:
        if hasattr(handler, "setStream"):
            handler.setStream(sys.stderr)
    if args.profile:
        import yappi

        yappi.set_clock_type("cpu")
        yappi.start(builtins=True)
    sampler = _Sampler() if args.sample else None
    split = _split() if args.split else None
    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = drain(**options)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if sampler:
        sampler.stop()
    if args.profile:
        yappi.stop()
    delivered = Notification.objects.filter(status="delivered").count()
    out = {
        "n": args.n,
        "delivered": delivered,
        "report_delivered": report.delivered,
        "wall_s": round(wall, 3),
        "rate_per_s": round(delivered / wall, 1),
        "cpu_s": round(cpu, 3),
        "cpu_s_per_1000": round(cpu / delivered * 1000, 3),
        "answers_per_group": round(report.sent / max(1, report.groups), 1),
        "claims": report.batches,
        "vendor": connection.vendor,
    }
    if args.profile:
        out["profile"] = _profile(yappi)
    if sampler:
        out["samples"] = sampler.report()
    if split is not None:
        out["cpu_ms_per_push"] = {k: round(v / delivered * 1000, 3) for k, v in split.items()}
        out["cpu_ms_per_push"]["rest of the worker"] = round((cpu - sum(split.values())) / delivered * 1000, 3)
    print(json.dumps(out, indent=2))


def _split() -> dict[str, float]:
    """Wrap the worker's phases to add up the thread CPU each one uses (cheap: two clock reads a call)."""
    from notifications.delivery import claims, completer

    spent: dict[str, float] = defaultdict(float)

    def timed(owner, name, label):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            start = time.thread_time()
            try:
                return original(*a, **k)
            finally:
                spent[label] += time.thread_time() - start

        setattr(owner, name, wrapper)

    # The sending loop has a thread of its own: its CPU is in "rest of the worker".
    timed(completer.Completer, "finish", "group finish (policy, UPDATE, INSERT)")
    timed(claims.ClaimBuffer, "claim", "claim")
    timed(claims.ClaimBuffer, "keep_alive", "renewals")
    return spent


class _Sampler:
    """A cProfile of the worker's thread (it runs the database work and steps the sending loop)."""

    def __init__(self) -> None:
        import cProfile

        self.profile = cProfile.Profile(time.thread_time)  # CPU, not wall: the box is shared
        self.profile.enable()

    def stop(self) -> None:
        self.profile.disable()

    def report(self) -> dict[str, object]:
        import pstats

        stats = pstats.Stats(self.profile).stats
        total = sum(v[2] for v in stats.values()) or 1.0
        own: dict[str, float] = defaultdict(float)
        for (path, _, name), value in stats.items():
            for label, needles in GROUPS:
                if any(needle in path for needle in needles):
                    own[label] += value[2]
                    break
            else:
                own[f"other: {name[:50]}"] += value[2]
        shares = {
            k: round(100 * v / total, 1) for k, v in sorted(own.items(), key=lambda kv: -kv[1]) if v / total >= 0.01
        }
        rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:15]
        return {"share_of_own_time_%": shares, "top": [f"{v[2]:.3f}s {Path(k[0]).name}:{k[2]}" for k, v in rows]}


def _profile(yappi) -> dict[str, float]:
    """Share of CPU by group, on each function's own time (tsub), all threads."""
    own: dict[str, float] = defaultdict(float)
    total = 0.0
    for stat in yappi.get_func_stats():
        path = stat.module or ""
        total += stat.tsub
        for label, needles in GROUPS:
            if any(needle in path for needle in needles):
                own[label] += stat.tsub
                break
        else:
            own["other: " + (Path(path).name or stat.name)[:40]] += stat.tsub
    shares = {k: round(100 * v / total, 1) for k, v in sorted(own.items(), key=lambda kv: -kv[1])}
    top = {k: v for k, v in shares.items() if v >= 1.0}
    top["(total profiled cpu s)"] = round(total, 3)
    return top


if __name__ == "__main__":
    main()

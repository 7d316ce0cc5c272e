"""Does the cost stay flat as history grows? A drain on empty tables against one on millions of finished rows.

    python bench/history.py                  # 5,000,000 finished notifications and as many attempts
    python bench/history.py --rows 500000 --n 2000

Side by side in one run, on a dedicated database (BENCH_HISTORY_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/weave_bench_history):

1. empty tables: a drain of N new notifications by one qcluster, timed to the last terminal row;
   a `/metrics` scrape and the dashboard, each timed (median of 5, after one warm-up);
2. the tables filled with `--rows` delivered notifications and as many delivery attempts
   (generate_series SQL, then ANALYZE), and the same three measurements.

Prints a table and writes it to bench/results/history-<date>.md.
"""

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402

DATABASE_URL = "postgres://postgres@127.0.0.1:5432/weave_bench_history"

# Finished history: delivered rows spread over 30 days, one delivered attempt each, nothing leased or due.
FILL = """
TRUNCATE weave_notifications_deliveryattempt, weave_notifications_notification,
         django_q_ormq, django_q_task RESTART IDENTITY CASCADE;
INSERT INTO weave_notifications_notification
    (device_token, title, body, data, idempotency_key, status, attempts, next_attempt_at, delivered_at,
     provider_message_id, last_error, created_at, owner, fence, lease_expires_at, backend, collapse_key, priority,
     finished_at, options)
SELECT 'history-device-' || g, 'History', 'A finished notification', '{}', gen_random_uuid(), 'delivered', 1,
       NULL, now() - (g %% 2592000) * interval '1 second', 'msg-' || g, '',
       now() - (g %% 2592000) * interval '1 second' - interval '1 second', NULL, 1, NULL, 'default', '', 'normal',
       now() - (g %% 2592000) * interval '1 second', '{}'
FROM generate_series(1, %(rows)s) AS g;
INSERT INTO weave_notifications_deliveryattempt
    (notification_id, owner, fence, started_at, finished_at, http_status, latency_ms, outcome, reason, number)
SELECT g, 'push:history:1:x', 1,
       now() - (g %% 2592000) * interval '1 second' - interval '150 milliseconds',
       now() - (g %% 2592000) * interval '1 second', 200, 50 + (g %% 400)::int, 'delivered', '', 1
FROM generate_series(1, %(rows)s) AS g;
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000, help="finished notifications (and attempts)")
    parser.add_argument("--n", type=int, default=5000, help="new notifications drained per measurement")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--latency-ms", type=int, default=0, help="fake provider latency")
    parser.add_argument("--no-write", action="store_true", help="print only")
    return parser.parse_args(argv)


def drain(run: "harness.Bench", *, n: int, workers: int) -> float:
    """Seconds for one fresh cluster to drain `n` new due notifications (rows/s follows)."""
    from django.db import transaction
    from django_q.tasks import async_task

    from notifications.models import Notification

    run.start_cluster(workers=workers)
    run.provider_reset()
    with transaction.atomic():
        Notification.objects.bulk_create(harness.build_rows(n, due=True), batch_size=1000)
        for _ in range(workers):
            async_task("notifications.tasks.drain", group="bench-history")
    t0 = time.monotonic()
    seconds, _ = harness.wait_for_terminal(n, t0=t0, timeout=max(180, n / 5))
    run.stop_clusters()
    return seconds


def answer_times() -> dict[str, float]:
    """Median seconds of five `/metrics` scrapes and five dashboard loads (after one warm-up each)."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import override_settings

    user, _ = get_user_model().objects.get_or_create(
        username="bench-history", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    times = {}
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        for label, url in (("metrics", "/metrics"), ("dashboard", "/admin/weave/dashboard/")):
            samples = []
            for i in range(6):
                t = time.perf_counter()
                response = client.get(url, secure=True)  # the bench runs with production settings (HTTPS redirect)
                took = time.perf_counter() - t
                if response.status_code != 200:
                    raise RuntimeError(f"{url} answered {response.status_code}")
                if i:
                    samples.append(took)
            times[label] = statistics.median(samples)
    return times


def measure(run: "harness.Bench", args: argparse.Namespace, label: str) -> dict[str, object]:
    from notifications.models import DeliveryAttempt, Notification

    seconds = drain(run, n=args.n, workers=args.workers)
    answers = answer_times()
    return {
        "label": label,
        "history": Notification.objects.count() - args.n,
        "attempts": DeliveryAttempt.objects.count(),
        "seconds": seconds,
        "rate": args.n / seconds,
        **answers,
    }


def fill(rows: int) -> float:
    from django.db import connection

    t = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"rows": rows})
        cursor.execute("ANALYZE weave_notifications_notification")
        cursor.execute("ANALYZE weave_notifications_deliveryattempt")
    return time.monotonic() - t


def render(points: list[dict[str, object]], args: argparse.Namespace, fill_s: float) -> str:
    lines = [
        f"# History bench ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"N = {args.n} new notifications drained by one qcluster with {args.workers} workers, provider latency "
        f"{args.latency_ms} ms; history filled with {args.rows:,} delivered notifications and as many attempts "
        f"in {fill_s:.0f} s.",
        "",
        "| tables | finished rows | attempts | drain s | rows/s | /metrics s | dashboard s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in points:
        lines.append(
            f"| {p['label']} | {p['history']:,} | {p['attempts']:,} | {p['seconds']:.1f} | {p['rate']:.0f} | "
            f"{p['metrics']:.3f} | {p['dashboard']:.3f} |"
        )
    empty, full = points
    ratio = float(full["rate"]) / float(empty["rate"])  # type: ignore[arg-type]
    lines += ["", f"Throughput with history / empty: {ratio:.2f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import os

    args = parse_args(argv)
    harness.configure(os.environ.get("BENCH_HISTORY_DATABASE_URL") or DATABASE_URL)
    import logging

    logging.getLogger("django-q").setLevel(logging.WARNING)
    points = []
    with harness.bench() as run:
        run.start_provider(args.latency_ms)
        harness.reset_tables()
        points.append(measure(run, args, "empty"))
        print(f"empty: {points[-1]}", flush=True)
        fill_s = fill(args.rows)
        print(f"filled {args.rows:,} rows in {fill_s:.0f} s", flush=True)
        points.append(measure(run, args, "with history"))
        print(f"with history: {points[-1]}", flush=True)
    text = render(points, args, fill_s)
    print(text)
    if not args.no_write:
        out = harness.PROJECT_ROOT / "bench" / "results" / f"history-{datetime.now(UTC):%Y-%m-%d}.md"
        out.write_text(text)
        print(f"Wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

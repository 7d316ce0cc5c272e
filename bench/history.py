"""Does the cost stay flat as history grows? A drain on empty tables against one on millions of finished rows.

    python bench/history.py                  # 5,000,000 finished notifications and as many attempts
    python bench/history.py --rows 500000 --n 2000

Side by side in one run, on a dedicated database (BENCH_HISTORY_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/weave_bench_history):

1. empty tables: a drain of N new notifications by one qcluster, timed to the last terminal row;
   a `/metrics` scrape and the dashboard, each timed (median of 5, after one warm-up);
2. the tables filled with `--rows` delivered notifications and as many delivery attempts, `--job-rows`
   finished rows of each core-run job type (the `django.tasks` "task" type and the FCM topic jobs)
   with one attempt each, and `--runs` completed onboarding runs with their attempts and step
   receipts (generate_series SQL, then ANALYZE), and the same three measurements.

After each timing, one more scrape and one more dashboard render run with every SQL statement
timed (bench/history_queries.py); on the filled tables the slow ones are EXPLAINed (ANALYZE, BUFFERS).

Prints a table and writes it to bench/results/history-<date>.md, the statements and plans to
bench/results/history-plans-<date>.md. `--reuse` measures the tables as the last run left them
(no empty pass, no fill): for iterating on the queries.
"""

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness, history_queries  # noqa: E402

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
    (notification_id, owner, fence, started_at, finished_at, http_status, latency_ms, outcome, reason, number, backend)
SELECT g, 'push:history:1:x', 1,
       now() - (g %% 2592000) * interval '1 second' - interval '150 milliseconds',
       now() - (g %% 2592000) * interval '1 second', 200, 50 + (g %% 400)::int, 'delivered', '', 1, 'default'
FROM generate_series(1, %(rows)s) AS g;
"""

# Finished rows of the core-run job types: done, free, one attempt each, spread over the same 30 days.
FILL_JOBS = """
TRUNCATE weave_taskrow, weave_notifications_topicsubscription, weave_jobattempt, weave_jobstepreceipt
    RESTART IDENTITY CASCADE;
INSERT INTO weave_taskrow
    (owner, fence, lease_expires_at, state, attempts, epoch, next_attempt_at, last_error, created_at, finished_at,
     result_id, backend, queue_name, task_path, priority, takes_context, args, kwargs, return_value, started_at,
     last_attempted_at, options)
SELECT NULL, 1, NULL, 'done', 1, 0, NULL, '', now() - (g %% 2592000) * interval '1 second' - interval '1 second',
       now() - (g %% 2592000) * interval '1 second', gen_random_uuid()::text, 'default', 'default',
       'bench.history.task', 0, false, '[]', '{}', 'null', now() - (g %% 2592000) * interval '1 second',
       now() - (g %% 2592000) * interval '1 second', '{}'
FROM generate_series(1, %(jobs)s) AS g;
INSERT INTO weave_notifications_topicsubscription
    (owner, fence, lease_expires_at, state, attempts, epoch, next_attempt_at, last_error, created_at, finished_at,
     backend, topic, action, tokens)
SELECT NULL, 1, NULL, 'done', 1, 0, NULL, '', now() - (g %% 2592000) * interval '1 second' - interval '1 second',
       now() - (g %% 2592000) * interval '1 second', 'fcm', 'news', 'subscribe', '[]'
FROM generate_series(1, %(jobs)s) AS g;
INSERT INTO weave_jobattempt
    (job_type, job_id, number, owner, fence, outcome, reason, error_class, traceback, result, started_at, finished_at)
SELECT CASE WHEN g <= %(jobs)s THEN 'task' ELSE 'fcm_topic' END, (1 + (g - 1) %% %(jobs)s)::text, 1,
       'bench:history:1:x', 1, 'done', '', '', '', NULL,
       now() - (g %% 2592000) * interval '1 second' - interval '150 milliseconds',
       now() - (g %% 2592000) * interval '1 second'
FROM generate_series(1, 2 * %(jobs)s) AS g;
"""

# Completed onboarding runs (each with a released and a completed attempt and six step receipts).
FILL_RUNS = """
TRUNCATE weave_onboarding_stepreceipt, weave_onboarding_runattempt, weave_onboarding_onboardingrun,
         weave_onboarding_supplier RESTART IDENTITY CASCADE;
INSERT INTO weave_onboarding_supplier (legal_name, country, tax_id, contact_email, device_token, iban, bic, created_at)
SELECT 'Supplier ' || g, 'DE', 'DE' || (100000000 + g), 's' || g || '@x.example', '', '', '', now()
FROM generate_series(1, %(runs)s) AS g;
INSERT INTO weave_onboarding_onboardingrun
    (supplier_id, phase, status, reason, created_at, finished_at, owner, fence, lease_expires_at,
     plan, reopened, failed_step, failure_fixable, undo_state)
SELECT g, 'send_welcome_notification', 'completed', '',
       now() - (g %% 2592000) * interval '1 second' - interval '10 seconds',
       now() - (g %% 2592000) * interval '1 second', NULL, 2, NULL, '[]', 0, '', true, ''
FROM generate_series(1, %(runs)s) AS g;
INSERT INTO weave_onboarding_runattempt (run_id, fence, owner, started_at, ended_at, outcome, reason)
SELECT 1 + g / 2, 1 + g %% 2, 'onboarding:history:1:x',
       now() - ((1 + g / 2) %% 2592000) * interval '1 second' - interval '6 seconds',
       now() - ((1 + g / 2) %% 2592000) * interval '1 second',
       CASE WHEN g %% 2 = 1 THEN 'completed' ELSE 'released' END, 'bench'
FROM generate_series(0, 2 * %(runs)s - 1) AS g;
INSERT INTO weave_onboarding_stepreceipt (run_id, step, fence, owner, completed_at, output, undone_at, undone_fence)
SELECT r, s.step, 2, 'onboarding:history:1:x',
       now() - (r %% 2592000) * interval '1 second' - (6 - s.n) * interval '900 milliseconds', '{}', NULL, NULL
FROM generate_series(1, %(runs)s) AS r,
     (VALUES (1, 'verify_tax_id'), (2, 'screen_sanctions'), (3, 'create_vendor_record'), (4, 'set_payment_terms'),
             (5, 'register_bank_account'), (6, 'send_welcome_notification')) AS s(n, step);
"""

ANALYZED = (
    "weave_notifications_notification",
    "weave_notifications_deliveryattempt",
    "weave_taskrow",
    "weave_notifications_topicsubscription",
    "weave_jobattempt",
    "weave_onboarding_onboardingrun",
    "weave_onboarding_runattempt",
    "weave_onboarding_stepreceipt",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000, help="finished notifications (and attempts)")
    parser.add_argument("--job-rows", type=int, default=1_000_000, help="finished rows per core-run job type")
    parser.add_argument("--runs", type=int, default=200_000, help="completed onboarding runs")
    parser.add_argument("--explain-ms", type=float, default=2.0, help="EXPLAIN the statements slower than this")
    parser.add_argument("--reuse", action="store_true", help="measure the tables as they are (no empty pass, no fill)")
    parser.add_argument("--no-drain", action="store_true", help="with --reuse: add no rows, time the pages only")
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


def staff_client() -> Any:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(
        username="bench-history", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    return client


def answer_times(client: Any) -> dict[str, float]:
    """Median seconds of five `/metrics` scrapes and five dashboard loads (after one warm-up each)."""
    from django.test.utils import override_settings

    times = {}
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        for label, url in history_queries.PAGES:
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


def fresh_process_counters(*, fresh_site: bool = False) -> None:
    """Forget the running attempt counters, as a newly started process would; `fresh_site` also drops
    their stored checkpoints, as on a site that never served a scrape (its first one counts every row)."""
    from notifications import console
    from onboarding import console as onboarding_console
    from weave import metrics
    from weave.models import MetricCheckpoint

    for counts in (metrics._job_attempts, console._attempts, console._latency, onboarding_console._attempts):
        counts.reset()
    if fresh_site:
        MetricCheckpoint.objects.all().delete()


def first_scrape_time(client: Any) -> float:
    from django.test.utils import override_settings

    with override_settings(ALLOWED_HOSTS=["testserver"]):
        t = time.perf_counter()
        response = client.get("/metrics", secure=True)
        took = time.perf_counter() - t
    if response.status_code != 200:
        raise RuntimeError(f"/metrics answered {response.status_code}")
    return took


def measure(run: "harness.Bench", args: argparse.Namespace, label: str, *, drained: bool = True) -> dict[str, Any]:
    from notifications.models import DeliveryAttempt, Notification

    seconds = drain(run, n=args.n, workers=args.workers) if drained else float("nan")
    client = staff_client()
    fresh_process_counters(fresh_site=True)
    first_scrape = first_scrape_time(client)
    fresh_process_counters()
    process_scrape = first_scrape_time(client)
    answers = answer_times(client)
    captures = history_queries.capture(client, label)
    captures += history_queries.capture(client, label, fresh_ttl=True)[1:]
    if label != "empty":
        history_queries.explain(captures, above_ms=args.explain_ms)
    return {
        "label": label,
        "history": Notification.objects.count() - args.n,
        "attempts": DeliveryAttempt.objects.count(),
        "seconds": seconds,
        "rate": args.n / seconds,
        "first_scrape": first_scrape,
        "process_scrape": process_scrape,
        "captures": captures,
        **answers,
    }


def fill(args: argparse.Namespace) -> float:
    from django.db import connection

    t = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"rows": args.rows})
        cursor.execute(FILL_JOBS, {"jobs": args.job_rows})
        cursor.execute(FILL_RUNS, {"runs": args.runs})
        for table in ANALYZED:
            cursor.execute(f"ANALYZE {table}")
    return time.monotonic() - t


def empty_history() -> None:
    """Empty the job and onboarding tables too (harness.reset_tables empties the notifications)."""
    from django.db import connection

    harness.reset_tables()
    with connection.cursor() as cursor:
        cursor.execute(FILL_JOBS.split(";")[0])
        cursor.execute(FILL_RUNS.split(";")[0])
        for table in ANALYZED:
            cursor.execute(f"ANALYZE {table}")


def render(points: list[dict[str, Any]], args: argparse.Namespace, fill_s: float) -> str:
    lines = [
        f"# History bench ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"N = {args.n} new notifications drained by one qcluster with {args.workers} workers, provider latency "
        f"{args.latency_ms} ms; history filled with {args.rows:,} delivered notifications and as many attempts, "
        f"{args.job_rows:,} finished rows of each core-run job type (task, fcm_topic) with an attempt each, and "
        f"{args.runs:,} completed onboarding runs with their attempts and receipts, in {fill_s:.0f} s.",
        "",
        "/metrics and dashboard: median of five after a warm-up. First scrape of a site: no stored counter "
        "checkpoint, the running counters count every stored attempt once. First scrape of a process: a new "
        "process, starting from the stored checkpoints.",
        "",
        "| tables | finished rows | attempts | drain s | rows/s | /metrics s | dashboard s | first scrape of a site s "
        "| first scrape of a process s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in points:
        lines.append(
            f"| {p['label']} | {p['history']:,} | {p['attempts']:,} | {p['seconds']:.1f} | {p['rate']:.0f} | "
            f"{p['metrics']:.3f} | {p['dashboard']:.3f} | {p['first_scrape']:.3f} | {p['process_scrape']:.3f} |"
        )
    if len(points) == 2:
        empty, full = points
        lines += [
            "",
            f"With history / empty: throughput {full['rate'] / empty['rate']:.2f}, /metrics "
            f"{full['metrics'] / empty['metrics']:.2f}x, dashboard {full['dashboard'] / empty['dashboard']:.2f}x.",
        ]
    return "\n".join(lines) + "\n"


def render_plans(points: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = [
        f"# History bench: every statement of one scrape and one dashboard render "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"The slowest statements of each page; on the filled tables every SELECT above {args.explain_ms:g} ms "
        "is EXPLAINed (ANALYZE, BUFFERS) below.",
        "",
    ]
    captures = [c for p in points for c in p["captures"]]
    return "\n".join(head) + history_queries.render(captures)


def main(argv: list[str] | None = None) -> int:
    import os

    args = parse_args(argv)
    harness.configure(os.environ.get("BENCH_HISTORY_DATABASE_URL") or DATABASE_URL)
    import logging

    from weave.tasks.worker import ensure_registered

    ensure_registered()  # the "task" job type, as on a site whose TASKS use Weave's backend
    logging.getLogger("django-q").setLevel(logging.WARNING)
    points = []
    fill_s = float("nan")
    with harness.bench() as run:
        run.start_provider(args.latency_ms)
        if not args.reuse:
            empty_history()
            points.append(measure(run, args, "empty"))
            print(f"empty: {_brief(points[-1])}", flush=True)
            fill_s = fill(args)
            print(f"filled {args.rows:,} rows in {fill_s:.0f} s", flush=True)
        points.append(measure(run, args, "with history", drained=not (args.reuse and args.no_drain)))
        print(f"with history: {_brief(points[-1])}", flush=True)
    text = render(points, args, fill_s)
    plans = render_plans(points, args)
    print(text)
    if not args.no_write:
        stamp = f"{datetime.now(UTC):%Y-%m-%d}"
        for name, body in ((f"history-{stamp}.md", text), (f"history-plans-{stamp}.md", plans)):
            out = harness.PROJECT_ROOT / "bench" / "results" / name
            out.write_text(body)
            print(f"Wrote {out}")
    else:
        print(plans)
    return 0


def _brief(point: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in point.items() if k != "captures"}


if __name__ == "__main__":
    sys.exit(main())

"""Query plans of the operator console on a large table: every query the dashboard and /metrics run.

    python bench/console_plans.py --notifications 1000000 --attempts 2000000

Fills a separate PostgreSQL database (CONSOLE_BENCH_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/weave_bench_console) with synthetic rows in bulk SQL, renders the
dashboard and one scrape while recording their queries, and prints EXPLAIN (ANALYZE, BUFFERS) of each,
with its execution time. The numbers go to docs/console.md by hand.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/weave_bench_console"
os.environ["DATABASE_URL"] = os.environ.get("CONSOLE_BENCH_DATABASE_URL", DEFAULT_URL)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
os.environ["ALLOWED_HOSTS"] = "testserver"  # the test client's host


def ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


FILL = """
TRUNCATE weave_notifications_deliveryattempt, weave_notifications_notification,
         weave_notifications_breakeropening RESTART IDENTITY CASCADE;
INSERT INTO weave_notifications_notification
    (device_token, title, body, data, idempotency_key, status, attempts, next_attempt_at, delivered_at,
     provider_message_id, last_error, created_at, owner, fence, lease_expires_at)
SELECT 'device-' || g, 'Title', '', '{}', gen_random_uuid(),
       CASE WHEN g % 100 = 0 THEN 'pending' WHEN g % 50 = 1 THEN 'failed' ELSE 'delivered' END,
       1,
       CASE WHEN g % 100 = 0 THEN now() - (g % 7200) * interval '1 second' + interval '1 hour' ELSE NULL END,
       CASE WHEN g % 100 = 0 THEN NULL ELSE now() - (g % 2592000) * interval '1 second' END,
       '', '', now() - (g % 2592000) * interval '1 second',
       CASE WHEN g % 10000 = 0 THEN 'push:bench:1:x' ELSE NULL END, 1,
       CASE WHEN g % 10000 = 0 THEN now() + interval '20 seconds' ELSE NULL END
FROM generate_series(1, %(notifications)s) AS g;
INSERT INTO weave_notifications_deliveryattempt
    (notification_id, owner, fence, started_at, finished_at, http_status, latency_ms, outcome, reason)
SELECT 1 + (g % %(notifications)s), 'push:bench:1:x', 1,
       now() - (g * 2592000.0 / %(attempts)s) * interval '1 second' - interval '150 milliseconds',
       now() - (g * 2592000.0 / %(attempts)s) * interval '1 second',
       200, 50 + ((g::bigint * 7919) % 400)::int,
       CASE WHEN g % 20 = 0 THEN 'temporary' WHEN g % 97 = 0 THEN 'unknown' ELSE 'delivered' END, ''
FROM generate_series(1, %(attempts)s) AS g;
ANALYZE weave_notifications_notification;
ANALYZE weave_notifications_deliveryattempt;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notifications", type=int, default=1_000_000)
    parser.add_argument("--attempts", type=int, default=2_000_000)
    parser.add_argument("--no-fill", action="store_true", help="keep the rows from the last run")
    args = parser.parse_args()
    ensure_database(os.environ["DATABASE_URL"])

    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from weave.dashboard import clear_ttl_cache

    call_command("migrate", "--noinput", verbosity=0)
    if not args.no_fill:
        started = time.monotonic()
        with connection.cursor() as cursor:
            sql = FILL.replace("%(notifications)s", str(args.notifications))
            cursor.execute(sql.replace("%(attempts)s", str(args.attempts)))
        print(
            f"-- filled {args.notifications:,} notifications, {args.attempts:,} attempts in "
            f"{time.monotonic() - started:.0f} s"
        )
    user, _ = User.objects.get_or_create(username="plans", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    for label, url in (("dashboard", "/admin/weave/dashboard/?refresh=0"), ("metrics", "/metrics")):
        client.get(url)  # warm: the metrics' running counters do their one full count here
        clear_ttl_cache()  # so the dashboard's TTL advice queries are measured too
        with CaptureQueriesContext(connection) as captured:
            started = time.monotonic()
            response = client.get(url)
            elapsed = time.monotonic() - started
        assert response.status_code == 200, response.status_code
        print(f"\n==== {label}: {len(captured)} queries, {elapsed * 1000:.0f} ms for the whole page")
        for query in captured.captured_queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith("SELECT") or "django_session" in sql or "auth_user" in sql:
                continue
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            print(f"\n-- {sql[:400]}\n{plan}")


if __name__ == "__main__":
    main()

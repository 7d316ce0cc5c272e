"""Query plans of the operator console on a large table: every query the dashboard and /metrics run.

    python bench/console_plans.py --notifications 1000000 --attempts 2000000 --runs 200000

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
     provider_message_id, last_error, created_at, owner, fence, lease_expires_at, backend, collapse_key, priority,
     finished_at, options)
SELECT 'device-' || g, 'Title', '', '{}', gen_random_uuid(),
       CASE WHEN g % 100 = 0 THEN 'pending' WHEN g % 50 = 1 THEN 'failed' ELSE 'delivered' END,
       1,
       CASE WHEN g % 100 = 0 THEN now() - (g % 7200) * interval '1 second' + interval '1 hour' ELSE NULL END,
       CASE WHEN g % 100 = 0 THEN NULL ELSE now() - (g % 2592000) * interval '1 second' END,
       '', '', now() - (g % 2592000) * interval '1 second',
       CASE WHEN g % 10000 = 0 THEN 'push:bench:1:x' ELSE NULL END, 1,
       CASE WHEN g % 10000 = 0 THEN now() + interval '20 seconds' ELSE NULL END,
       CASE WHEN g % 3 = 0 THEN 'apns' ELSE 'fcm' END, '', 'normal',
       CASE WHEN g % 100 = 0 THEN NULL ELSE now() - (g % 2592000) * interval '1 second' END, '{}'
FROM generate_series(1, %(notifications)s) AS g;
INSERT INTO weave_notifications_deliveryattempt
    (notification_id, owner, fence, started_at, finished_at, http_status, latency_ms, outcome, reason)
SELECT 1 + (g % %(notifications)s), 'push:bench:1:x', 1,
       now() - (g * 2592000.0 / %(attempts)s) * interval '1 second' - interval '150 milliseconds',
       now() - (g * 2592000.0 / %(attempts)s) * interval '1 second',
       200, 50 + ((g::bigint * 7919) % 400)::int,
       CASE WHEN g % 20 = 0 THEN 'temporary' WHEN g % 97 = 0 THEN 'unknown' ELSE 'delivered' END, ''
FROM generate_series(1, %(attempts)s) AS g;
TRUNCATE weave_onboarding_stepreceipt, weave_onboarding_runattempt, weave_onboarding_onboardingrun,
         weave_onboarding_supplier RESTART IDENTITY CASCADE;
INSERT INTO weave_onboarding_supplier
    (legal_name, country, tax_id, contact_email, device_token, iban, bic, created_at)
SELECT 'Supplier ' || g, 'DE', 'DE' || (100000000 + g), 's' || g || '@x.example', 'd' || g, '', '', now()
FROM generate_series(1, %(runs)s) AS g;
INSERT INTO weave_onboarding_onboardingrun
    (supplier_id, phase, status, reason, created_at, finished_at, owner, fence, lease_expires_at,
     plan, reopened, failed_step, failure_fixable, undo_state)
SELECT g,
       CASE WHEN g % 200 = 0 THEN 'create_vendor_record' WHEN g % 50 = 0 THEN 'set_payment_terms'
            ELSE 'send_welcome_notification' END,
       CASE WHEN g % 200 = 0 THEN 'running' WHEN g % 50 = 0 THEN 'failed' ELSE 'completed' END,
       '', now() - (g * 2592000.0 / %(runs)s) * interval '1 second', NULL,
       CASE WHEN g % 200 = 0 THEN 'onboarding:bench:1:x' ELSE NULL END, 2,
       CASE WHEN g % 200 = 0 THEN now() + (g % 3 - 1) * interval '20 seconds' ELSE NULL END,
       '[]', 0, CASE WHEN g % 200 <> 0 AND g % 50 = 0 THEN 'register_bank_account' ELSE '' END, true, ''
FROM generate_series(1, %(runs)s) AS g;
INSERT INTO weave_onboarding_runattempt (run_id, fence, owner, started_at, ended_at, outcome, reason)
SELECT 1 + (g / 2), 1 + g % 2, 'onboarding:bench:1:x',
       now() - ((g / 2) * 2592000.0 / %(runs)s) * interval '1 second' - interval '6 seconds',
       now() - ((g / 2) * 2592000.0 / %(runs)s) * interval '1 second',
       CASE WHEN g % 2 = 1 THEN 'completed' WHEN g % 97 = 0 THEN 'blocked' WHEN g % 89 = 0 THEN 'crashed'
            ELSE 'released' END, 'bench'
FROM generate_series(0, 2 * %(runs)s - 1) AS g;
INSERT INTO weave_onboarding_stepreceipt (run_id, step, fence, owner, completed_at, output, undone_at, undone_fence)
SELECT r, s.step, 2, 'onboarding:bench:1:x',
       now() - (r * 2592000.0 / %(runs)s) * interval '1 second' - (6 - s.n) * interval '900 milliseconds', '{}',
       NULL, NULL
FROM generate_series(1, %(runs)s) AS r,
     (VALUES (1, 'verify_tax_id'), (2, 'screen_sanctions'), (3, 'create_vendor_record'), (4, 'set_payment_terms'),
             (5, 'register_bank_account'), (6, 'send_welcome_notification')) AS s(n, step);
ANALYZE weave_notifications_notification;
ANALYZE weave_notifications_deliveryattempt;
ANALYZE weave_onboarding_onboardingrun;
ANALYZE weave_onboarding_runattempt;
ANALYZE weave_onboarding_stepreceipt;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notifications", type=int, default=1_000_000)
    parser.add_argument("--attempts", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=200_000)
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
            sql = sql.replace("%(runs)s", str(args.runs))
            cursor.execute(sql.replace("%(attempts)s", str(args.attempts)))
        print(
            f"-- filled {args.notifications:,} notifications, {args.attempts:,} attempts, {args.runs:,} runs in "
            f"{time.monotonic() - started:.0f} s"
        )
    user, _ = User.objects.get_or_create(username="plans", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    dashboard = "/admin/weave/dashboard/?refresh=0"
    client.get("/metrics")  # warm: the metrics' running counters do their one full count here
    for label, url, fresh_ttl in (
        ("dashboard with the TTL advice computed (once a minute)", dashboard, True),
        ("dashboard with the TTL advice cached (every other refresh)", dashboard, False),
        ("metrics", "/metrics", False),
    ):
        if fresh_ttl:
            clear_ttl_cache()
        else:
            client.get(url)  # the cache filled, the connection warm
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

"""PostgreSQL restarted in the middle of a drain: a throwaway server (started here), a real qcluster.

Every row ends delivered, none stays leased, the provider saw every key, and the cluster is still
running afterwards. Both a fast restart (sessions ended, checkpoint) and an immediate one (a crash,
recovery at start) are tried. The database is reached only through subprocesses and psql: the test
process's own Django database is not involved.
"""

import subprocess
import sys

import pytest

from notifications.testing.fake_provider import FakePushProvider
from tools.pgcluster import ThrowawayPostgres, bin_dir
from tools.processes import PROJECT_ROOT, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bin_dir() is None, reason="no PostgreSQL server binaries in /usr/lib/postgresql"),
]

ROWS = 300
TABLE = "weave_notifications_notification"


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(PROJECT_ROOT / "manage.py"), *args], env=env, check=True, timeout=300)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restarting_mid_drain__every_row_is_delivered_and_none_stays_leased(groups, mode):
    import os

    with ThrowawayPostgres() as pg, FakePushProvider(latency_ms=400) as fake:
        pg.psql("CREATE DATABASE weave")
        env = {
            **os.environ,
            "DEBUG": "true",
            "DATABASE_URL": pg.url("weave"),
            "WEAVE_PUSH_URL": fake.push_url,
            "WEAVE_Q_WORKERS": "2",
            "WEAVE_PUSH_LEASE_TTL": "5",
            "WEAVE_PUSH_TIMEOUT": "3",
            "WEAVE_PUSH_BATCH_SIZE": "20",
            "WEAVE_PUSH_BACKOFF_BASE": "0.5",
        }
        manage(env, "migrate", "--verbosity", "0")
        cluster = groups.manage("qcluster", "qcluster", env=env)
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="the cluster to start")
        manage(
            env,
            "shell",
            "-c",
            "from notifications.services import notification_create\n"
            f"for i in range({ROWS}): notification_create(device_token=f'd-{{i}}', title='Hi', body='restart')",
        )
        wait_until(lambda: fake.stats()["unique_deliveries"] >= 30, timeout=60, message="the drain to be under way")
        pg.restart(mode, down_for=1.0)  # in the middle of the drain: sends in flight, rows leased

        def finished() -> bool:
            assert cluster.alive(), cluster.log_tail()
            return pg.psql(f"SELECT count(*) FROM {TABLE} WHERE status = 'delivered'", "weave") == str(ROWS)

        wait_until(finished, timeout=180, message="every notification to be delivered after the restart")
        leased = pg.psql(f"SELECT count(*) FROM {TABLE} WHERE owner IS NOT NULL", "weave")
        stats = fake.stats()
        assert cluster.alive()
    assert leased == "0"
    assert stats["unique_deliveries"] == ROWS
    print(f"restart ({mode}): {stats['duplicates']} sends repeated under their idempotency key")

"""PostgreSQL restarted in the middle of a drain and of an onboarding run: a throwaway server (started
here), a real qcluster.

Every notification ends delivered, none stays leased, the provider saw every key; the onboarding runs
complete with exactly one receipt per step; the cluster is still running afterwards. Both a fast
restart (sessions ended, checkpoint) and an immediate one (a crash, recovery at start) are tried. The
database is reached only through subprocesses and psql: the test process's own Django database is not
involved.
"""

import subprocess
import sys

import pytest

from notifications.testing.fake_provider import FakePushProvider
from onboarding.testing.fake_services import FakeConfig, FakeSupplierServices
from tools.pgcluster import ThrowawayPostgres, bin_dir
from tools.processes import PROJECT_ROOT, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bin_dir() is None, reason="no PostgreSQL server binaries in /usr/lib/postgresql"),
]

ROWS = 300
TABLE = "weave_notifications_notification"
RUNS = 3
CREATE = (
    "from notifications.services import notification_create\n"
    "from onboarding.services import onboarding_start\n"
    "from tests.factories import SupplierFactory\n"
    "for i in range({rows}): notification_create(device_token=f'd-{{i}}', title='Hi', body='restart')\n"
    "for i in range({runs}): onboarding_start(supplier=SupplierFactory(device_token=''))\n"
)


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(PROJECT_ROOT / "manage.py"), *args], env=env, check=True, timeout=300)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restarting_mid_drain__every_row_is_finished_and_none_stays_leased(groups, mode):
    import os

    slow_steps = FakeSupplierServices(config=FakeConfig(latency=0.4))
    with ThrowawayPostgres() as pg, FakePushProvider(latency_ms=400) as fake, slow_steps as services:
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
            "WEAVE_SUPPLIER_API_URL": services.url,
            "WEAVE_SUPPLIER_API_TIMEOUT": "3",
            "WEAVE_ONBOARDING_LEASE_TTL": "5",
            "WEAVE_ONBOARDING_RETRY_BACKOFF": "0.2",
        }
        manage(env, "migrate", "--verbosity", "0")
        cluster = groups.manage("qcluster", "qcluster", env=env)
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="the cluster to start")
        manage(env, "shell", "-c", CREATE.format(rows=ROWS, runs=RUNS))

        def under_way() -> bool:
            receipts = int(pg.psql("SELECT count(*) FROM weave_onboarding_stepreceipt", "weave"))
            return fake.stats()["unique_deliveries"] >= 30 and receipts >= 1

        wait_until(under_way, timeout=60, message="the drain and a run to be under way")
        unfinished = pg.psql("SELECT count(*) FROM weave_onboarding_onboardingrun WHERE status <> 'completed'", "weave")
        assert int(unfinished) >= 1  # a run is mid-plan when the server goes down
        pg.restart(mode, down_for=1.0)  # in the middle of the drain: sends in flight, rows leased

        def finished() -> bool:
            assert cluster.alive(), cluster.log_tail()
            delivered = pg.psql(f"SELECT count(*) FROM {TABLE} WHERE status = 'delivered'", "weave")
            completed = pg.psql(
                "SELECT count(*) FROM weave_onboarding_onboardingrun WHERE status = 'completed'", "weave"
            )
            return (delivered, completed) == (str(ROWS), str(RUNS))

        wait_until(finished, timeout=240, message="every notification and run to finish after the restart")
        leased = pg.psql(
            f"SELECT (SELECT count(*) FROM {TABLE} WHERE owner IS NOT NULL)"
            " + (SELECT count(*) FROM weave_onboarding_onboardingrun WHERE owner IS NOT NULL)",
            "weave",
        )
        # Receipts intact: each run has one receipt per step of its plan, never two for one step.
        receipts = pg.psql("SELECT count(*), count(DISTINCT (run_id, step)) FROM weave_onboarding_stepreceipt", "weave")
        stats = fake.stats()
        assert cluster.alive()
    assert leased == "0"
    assert stats["unique_deliveries"] == ROWS
    total, distinct = receipts.split("|")
    assert total == distinct and int(total) >= RUNS * 5, receipts
    print(f"restart ({mode}): {stats['duplicates']} sends repeated under their idempotency key")

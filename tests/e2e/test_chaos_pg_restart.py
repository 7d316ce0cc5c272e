"""The chaos run's pg_restart fault: PostgreSQL itself restarted (-m fast, then -m immediate) under K clusters.

The run owns its server (a throwaway cluster, tools/pgserver.py), so it may restart it; every invariant
of the chaos audit must hold afterwards, and the restart recovery figure must stay within its bound.
"""

import pytest
from django.core.management import call_command

from tools.chaos.config import ChaosConfig
from tools.chaos.faults import PG_RESTART
from tools.chaos.runner import ChaosRunner
from tools.pgserver import ThrowawayPostgres, default_database_on, postgres_bin

from .conftest import free_port

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.e2e,
    pytest.mark.needs(None if postgres_bin() else "PostgreSQL server binaries (initdb, pg_ctl) are missing"),
]


def test_chaos__every_invariant_holds_when_postgresql_restarts(tmp_path, capsys, django_db_blocker):
    config = ChaosConfig(
        notifications=500,
        runs=12,
        clusters=3,
        kills=0,
        stops=0,
        restarts=0,
        partitions=0,
        pg_restarts=2,
        fault_window=(0.05, 0.4),
        fault_gap=2.0,
        latency_ms=100,
        seed=7,
        deadline=150,
        push_port=free_port(),
        supplier_port=free_port(),
        log_dir=tmp_path / "chaos",
        progress=False,
    )
    with ThrowawayPostgres() as server, django_db_blocker.unblock():
        server.create_database("weave_chaos_restart")
        with default_database_on(server, "weave_chaos_restart"):
            call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)  # the test-only apps too
            outcome = ChaosRunner(config, database_url=server.url("weave_chaos_restart"), server=server).run()

    report = outcome.report
    assert not outcome.result.violations, report
    ran = [f for f in outcome.faults if f.kind == PG_RESTART and f.db_time is not None]
    assert [f.target for f in ran] == ["PostgreSQL -m fast", "PostgreSQL -m immediate"], report
    assert all(f.held for f in ran), f"a restart found no lease held: not under load\n{report}"
    assert outcome.result.figures["pg_restart_recovery"]["restarts"], report
    with capsys.disabled():
        print(report)

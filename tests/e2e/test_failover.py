"""A failover to another address: the database moves from 127.0.0.1 to 127.0.0.2 (another port too) mid-drain.

The workers know both addresses through libpq's multi-host connection string (`host=a,b port=p1,p2`,
`target_session_attrs=read-write`), as a site names its primary and its standby. The throwaway server is
stopped at the first address and the same data directory is started at the second, which is what
clients see of a promoted standby: the old address refuses, the new one answers with the same data.
Afterwards every notification is delivered once by its key, no lease taken before the move is still held
TTL + a few seconds later (database clock), no cluster died, the pusher rode the outage out with its
backoff, and the workers' reports record the outage for the dashboard.
"""

import socket
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection

from notifications.models import Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from tests.e2e.clusters import outage_env
from tests.e2e.test_pg_restart import TTL, assert_leases_let_go, reconnecting
from tools.pgserver import ThrowawayPostgres, default_database_on, free_port, postgres_bin
from tools.processes import wait_until
from weave.models import WorkerReport

FIRST, SECOND = "127.0.0.1", "127.0.0.2"
DB = "weave_failover_e2e"


def _second_address_usable() -> bool:
    try:
        free_port(SECOND)
    except OSError:
        return False
    return True


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.postgres,
    pytest.mark.needs(None if postgres_bin() else "PostgreSQL server binaries (initdb, pg_ctl) are missing"),
    pytest.mark.needs(None if _second_address_usable() else f"cannot bind {SECOND} (no loopback /8 here)"),
]


@pytest.fixture
def moving_server(django_db_blocker):
    """A throwaway server at FIRST; this process reaches it, and later its new address, by both hosts."""
    with ThrowawayPostgres() as server, django_db_blocker.unblock():
        server.create_database(DB)
        second_port = free_port(SECOND)
        with default_database_on(server, DB):
            settings_dict = connection.settings_dict
            settings_dict.update(HOST=f"{FIRST},{SECOND}", PORT=f"{server.port},{second_port}")
            settings_dict["OPTIONS"] = {**settings_dict.get("OPTIONS", {}), "target_session_attrs": "read-write"}
            connection.close()
            call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)  # the test-only apps too
            yield server, second_port


def test_workers_follow_the_database_to_its_new_address__nothing_hangs_and_no_lease_outlives_its_ttl(
    moving_server, groups, worker_env
):
    server, second_port = moving_server
    url = (
        f"postgres://postgres@/{DB}?host={FIRST},{SECOND}&port={server.port},{second_port}"
        "&target_session_attrs=read-write"
    )
    env = outage_env(worker_env, url, TTL)
    with FakePushProvider(latency_ms=250) as fake:
        env["WEAVE_PUSH_URL"] = fake.push_url
        ids = [notification_create(device_token=f"failover-{i}", title="Hi", body=str(i)).pk for i in range(600)]
        clusters = [groups.manage(f"qcluster-failover-{i}", "qcluster", env=env) for i in (1, 2)]

        def delivered(at_least: int):
            def check() -> bool:
                for cluster in clusters:
                    assert cluster.alive(), cluster.log_tail()
                return Notification.objects.filter(pk__in=ids, status=Notification.Status.DELIVERED).count() >= at_least

            return lambda: reconnecting(check)

        wait_until(delivered(60), timeout=120, message="60 deliveries before the failover")
        before = reconnecting(lambda: _db_now())
        held = set(Notification.objects.filter(pk__in=ids).live().values_list("pk", "fence"))
        assert held, "no notification was held when the server moved: not mid-drain"
        first_port = server.port
        took = server.relocate(SECOND, second_port, mode="fast", downtime=1.0)
        connection.close()
        with pytest.raises(OSError):  # the old address is gone for good, as after a real failover
            socket.create_connection((FIRST, first_port), timeout=1).close()
        print(f"moved {FIRST}:{first_port} -> {SECOND}:{second_port} in {took:.2f} s, {len(held)} rows held")

        assert_leases_let_go(Notification, before, held)
        began = time.monotonic()
        wait_until(delivered(len(ids)), timeout=180, message="every notification to be delivered after the move")
        print(f"the rest of the drain after the move: {time.monotonic() - began:.1f} s")
        stats = fake.stats()
        ended = reconnecting(lambda: _db_now())
        wait_until(
            lambda: reconnecting(lambda: _outages_reported(before)) >= 1,
            timeout=60,
            message="a worker report recording the outage",
        )

    rows = list(Notification.objects.filter(pk__in=ids))
    assert {r.status for r in rows} == {Notification.Status.DELIVERED}
    assert all(r.owner is None for r in rows)
    assert set(stats["delivered_keys"]) == {str(r.idempotency_key) for r in rows}
    assert stats["unique_deliveries"] == len(ids)
    logs = "\n".join(cluster.log_tail(100_000) for cluster in clusters)
    # The pushers saw the database go and backed off instead of stopping (weave.reconnect).
    assert "event=broker_cut_off" in logs and "event=broker_reconnected" in logs, logs[-4000:]
    # No pusher or monitor died (a failed dequeue or acknowledgement would kill it), and no task ran into
    # django-q2's timeout (a hung task gets its worker reincarnated).
    assert "reincarnated pusher" not in logs and "reincarnated monitor" not in logs, logs[-4000:]
    assert "after timeout" not in logs
    # The outage the workers recorded lies between the move's start and the drain's end (database clock).
    for report in WorkerReport.objects.exclude(link__last=None):
        last = report.link["last"]
        assert before - timedelta(seconds=1) <= _parse(last["began_at"]) <= _parse(last["ended_at"]) <= ended


def _db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _outages_reported(since) -> int:
    return sum(1 for r in WorkerReport.objects.all() if (r.link or {}).get("last") and r.seen_at >= since)


def _parse(text: str):
    from django.utils.dateparse import parse_datetime

    value = parse_datetime(text)
    assert value is not None, text
    return value

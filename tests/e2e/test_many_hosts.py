"""Three simulated hosts, one PostgreSQL: each host its own network namespace, address and clock.

Host 0 keeps this machine's clock, host 1 runs 5 minutes ahead, host 2 5 minutes behind (libfaketime,
monotonic time included). Each runs its own qcluster with the ORM broker, reaching PostgreSQL (a
throwaway server) and the fake provider through its veth link. The test process plays the web host.

It changes the machine's network configuration (a bridge, namespaces, veth pairs, all removed at the
end), so it runs only when asked: `make hosts` (WEAVE_HOSTS_TEST=1), as root, with libfaketime.
"""

import os
import sys
from collections import Counter
from contextlib import contextmanager

import pytest
from django.core.management import call_command
from django.db import transaction

from notifications.models import DeliveryAttempt, Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from tools.chaos.faults import owner_pid
from tools.hosts import SimulatedHosts, available
from tools.pgserver import ThrowawayPostgres, default_database_on, postgres_bin
from tools.processes import PROJECT_ROOT, wait_until

WHY_NOT = (
    None if os.environ.get("WEAVE_HOSTS_TEST") == "1" else "changes the network configuration: run `make hosts`"
) or available()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.postgres,
    pytest.mark.hosts,
    pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or ""),
    pytest.mark.needs(None if postgres_bin() else "PostgreSQL server binaries (initdb, pg_ctl) are missing"),
]

CLOCKS = (0, 300, -300)  # seconds off the real time, per host
N = 300


@pytest.fixture
def hosts():
    with SimulatedHosts(len(CLOCKS)) as made:
        yield made


@contextmanager
def three_hosts(hosts, groups, worker_env, django_db_blocker, **weave):
    """A throwaway PostgreSQL and the fake provider on the bridge, a qcluster on each host; yields (clusters, fake)."""
    with (
        ThrowawayPostgres(also_listen=(hosts.gateway,)) as server,
        django_db_blocker.unblock(),
        FakePushProvider(host=hosts.gateway, latency_ms=50) as fake,
    ):
        server.create_database("weave_hosts")
        with default_database_on(server, "weave_hosts"):
            call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)  # the test-only apps too
            url = f"postgres://postgres@{hosts.gateway}:{server.port}/weave_hosts"
            env = {**worker_env, "DATABASE_URL": url, "WEAVE_PUSH_URL": fake.push_url, "WEAVE_PUSH_BATCH_SIZE": "10"}
            env.update({f"WEAVE_{key}": str(value) for key, value in weave.items()})
            clusters = []
            for i, offset in enumerate(CLOCKS):
                args = hosts.command(
                    i, [sys.executable, str(PROJECT_ROOT / "manage.py"), "qcluster"], clock_offset=offset
                )
                clusters.append(groups.start(f"host{i}-qcluster", args, env=env))
            wait_until(
                lambda: all("running." in (c.log_tail(200) or "") for c in clusters),
                timeout=90,
                message="every host's qcluster to run",
            )
            yield clusters, fake


def delivered_count(ids) -> int:
    return Notification.objects.filter(pk__in=ids, status=Notification.Status.DELIVERED).count()


def test_three_hosts_with_skewed_clocks__each_does_its_share_and_nothing_is_sent_twice(
    hosts, groups, worker_env, django_db_blocker
):
    with three_hosts(hosts, groups, worker_env, django_db_blocker) as (clusters, fake):
        # One burst, committed at once: the first drain finds a backlog and asks for helpers until every
        # worker has one, so every host is offered tasks. (Rows trickling in one by one are all taken by
        # one lingering drain, by design: that would say nothing about the hosts' clocks.)
        with transaction.atomic():
            ids = [notification_create(device_token=f"hosts-{i}", title="Hi", body=str(i)).pk for i in range(N)]

        def delivered() -> bool:
            for cluster in clusters:
                assert cluster.alive(), cluster.log_tail()
            return delivered_count(ids) == N

        wait_until(delivered, timeout=240, message="every notification to be delivered")
        pids = {pid: i for i, c in enumerate(clusters) for pid in (c.pgid, *c.descendants())}
        owners = list(
            DeliveryAttempt.objects.filter(notification_id__in=ids, outcome="delivered").values_list("owner", flat=True)
        )
        by_host = Counter(pids.get(owner_pid(o) or -1, -1) for o in owners)
        stats = fake.stats()
        live = Notification.objects.filter(pk__in=ids).live().count()
        keys = {str(k) for k in Notification.objects.filter(pk__in=ids).values_list("idempotency_key", flat=True)}

    assert stats["unique_deliveries"] == N and live == 0
    assert set(stats["delivered_keys"]) == keys and len(owners) == N
    print(f"deliveries by host (clock offset): {[(CLOCKS[i], by_host.get(i, 0)) for i in range(len(CLOCKS))]}")
    for i, offset in enumerate(CLOCKS):
        # An even share is a third; a tenth is a host doing its part, not one starving.
        assert by_host.get(i, 0) >= N // 10, f"host {i} (clock {offset:+d} s) did {by_host.get(i, 0)} of {N}"


TTL = 4.0


@pytest.mark.parametrize("victim", range(len(CLOCKS)), ids=[f"clock{o:+d}" for o in CLOCKS])
def test_killing_any_one_host__its_rows_finish_within_ttl_plus_5_s(
    victim, hosts, groups, worker_env, django_db_blocker
):
    from tools.chaos.audit import _first_finish
    from tools.chaos.faults import held_rows
    from tools.chaos.runner import db_now

    with three_hosts(hosts, groups, worker_env, django_db_blocker, PUSH_LEASE_TTL=TTL, LEASE_TTL=TTL) as (
        clusters,
        fake,
    ):
        fake.configure(latency_ms=200)  # slower sends: the victim holds rows when it dies
        ids = [notification_create(device_token=f"kill-{i}", title="Hi", body=str(i)).pk for i in range(N)]
        victim_child = clusters[victim]
        pids = {victim_child.pgid, *victim_child.descendants()}
        wait_until(lambda: held_rows(pids), timeout=120, message=f"host {victim} to hold a lease")
        held, killed_at = held_rows(pids), db_now()
        groups.kill(victim_child)
        wait_until(lambda: delivered_count(ids) == N, timeout=240, message="every notification to be delivered")
        late = {row.pk: (_first_finish(row) - killed_at).total_seconds() for row in held}
        stats = fake.stats()

    assert held and stats["unique_deliveries"] == N
    worst = max(late.values())
    print(f"host {victim} (clock {CLOCKS[victim]:+d} s) killed holding {len(held)} rows; worst recovery {worst:.1f} s")
    assert worst <= TTL + 5, f"rows of the killed host finished up to {worst:.1f} s after the kill: {late}"

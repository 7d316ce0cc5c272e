"""PostgreSQL restarts under load: real qcluster processes against a throwaway server this test owns.

The server is restarted (fast: sessions are told and closed; immediate: a crash, then crash recovery)
in the middle of a push drain and while an onboarding step waits on the supplier services. Afterwards
every row must be finished as the fencing allows: each notification delivered once by its key, no lease
left held past TTL + a few seconds of the restart (database clock), one receipt per onboarding step.

Only the final state is asserted; the recovery times are printed for docs/operations-restarts.md.
"""

import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection

from notifications.models import DeliveryAttempt, Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, RunAttempt, StepReceipt, Supplier, VendorRecord
from onboarding.services import onboarding_start
from onboarding.testing.fake_services import FakeSupplierServices
from tests.e2e.clusters import outage_env
from tools.pgserver import ThrowawayPostgres, default_database_on, postgres_bin
from tools.processes import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.postgres,
    pytest.mark.needs(None if postgres_bin() else "PostgreSQL server binaries (initdb, pg_ctl) are missing"),
]

TTL = 4.0
SLACK = 5.0  # "a few seconds" past the TTL: the watcher's poll, a reconnect, a claim


@pytest.fixture(scope="module")
def own_server(django_db_blocker):
    """A throwaway PostgreSQL cluster, migrated, that this process's default connection points at."""
    with ThrowawayPostgres() as server, django_db_blocker.unblock():
        server.create_database("weave_restart_e2e")
        with default_database_on(server, "weave_restart_e2e"):
            call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)  # the test-only apps too
            yield server


@pytest.fixture
def env(own_server, worker_env):
    return {**outage_env(worker_env, own_server.url("weave_restart_e2e"), TTL), "WEAVE_ONBOARDING_LEASE_TTL": str(TTL)}


def db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def reconnecting(query):
    """Run `query()` from the test process, reconnecting after the server went away under it."""
    for _ in range(40):
        try:
            return query()
        except Exception:  # the test's own session died with the restart: open a new one
            connection.close()
            time.sleep(0.25)
    return query()


def restart_while_held(server, mode, model, ids):
    """Restart the server; return (database time just before, rows of `ids` held then as (pk, fence))."""
    before = reconnecting(db_now)
    held = set(reconnecting(lambda: list(model.objects.filter(pk__in=ids).live().values_list("pk", "fence"))))
    took = server.restart(mode, downtime=1.0)
    print(f"restart -m {mode}: server back after {took:.2f} s, {len(held)} rows were held")
    connection.close()  # the test's own session is gone with it
    return before, held


def assert_leases_let_go(model, before, held):
    """No row held at the restart is still held by that claim TTL + SLACK later (database clock)."""
    bound = before + timedelta(seconds=TTL + SLACK)
    wait_until(lambda: reconnecting(db_now) > bound, timeout=120, message="the database clock to pass TTL + slack")
    still = [(pk, fence) for pk, fence in held if model.objects.filter(pk=pk, fence=fence).live().exists()]
    assert not still, f"leases taken before the restart still held {TTL + SLACK:g} s after it: {still}"


def test_push_drain__survives_a_fast_and_an_immediate_restart(own_server, groups, env):
    with FakePushProvider(latency_ms=250) as fake:
        env = {**env, "WEAVE_PUSH_URL": fake.push_url}
        ids = [notification_create(device_token=f"restart-{i}", title="Hi", body=str(i)).pk for i in range(800)]
        # Started after the load exists, so the drain is still going when the restarts come.
        clusters = [groups.manage(f"qcluster-{i}", "qcluster", env=env) for i in (1, 2)]
        began = time.monotonic()

        def delivered(at_least):
            def check():
                for cluster in clusters:
                    assert cluster.alive(), cluster.log_tail()
                n = Notification.objects.filter(pk__in=ids, status=Notification.Status.DELIVERED).count()
                return n >= at_least

            return lambda: reconnecting(check)

        restarts = 0
        for mode in ("fast", "immediate"):
            # Mid-drain: some delivered since the last check, most still to go.
            done = reconnecting(
                lambda: (
                    Notification.objects.filter(pk__in=ids, owner__isnull=True)
                    .exclude(status=Notification.Status.PENDING)
                    .count()
                )
            )
            wait_until(delivered(done + 60), timeout=120, message=f"60 more deliveries before the {mode} restart")
            before, held = restart_while_held(own_server, mode, Notification, ids)
            assert held, f"no notification was held when the server went down (-m {mode}): not mid-drain"
            assert_leases_let_go(Notification, before, held)
            restarts += 1
        wait_until(delivered(len(ids)), timeout=180, message="every notification to be delivered")
        drained = time.monotonic() - began
        stats = fake.stats()

    assert restarts == 2
    rows = list(Notification.objects.filter(pk__in=ids))
    assert {r.status for r in rows} == {Notification.Status.DELIVERED}
    assert all(r.owner is None for r in rows)
    keys = [str(r.idempotency_key) for r in rows]
    assert len(set(keys)) == len(ids)
    # The fake delivers a key once and answers repeats as duplicates: every row's key is delivered, and
    # nothing else was.
    assert set(stats["delivered_keys"]) == set(keys)
    assert stats["unique_deliveries"] == len(ids)
    # Each row's last delivered attempt is at its final fence: no stale worker recorded over a newer one.
    for row in rows:
        attempt = DeliveryAttempt.objects.filter(notification=row, outcome=DeliveryAttempt.Outcome.DELIVERED).last()
        assert attempt is not None and attempt.fence <= row.fence
    print(
        f"drain of {len(ids)} with two restarts: {drained:.1f} s; {stats['requests']} requests, "
        f"{stats['duplicates']} repeats of a key already sent"
    )


def test_onboarding_step__survives_an_immediate_and_a_fast_restart(own_server, groups, env):
    suppliers = [
        Supplier.objects.create(
            legal_name=f"Restart Supplier {i}",
            country="DE",
            tax_id="DE811907980",
            contact_email=f"ap{i}@restart.example",
            device_token=f"restart-supplier-{i}",
            iban="DE89370400440532013000",
        )
        for i in range(4)
    ]
    with FakeSupplierServices() as services, FakePushProvider() as push:
        env = {**env, "WEAVE_SUPPLIER_API_URL": services.url, "WEAVE_PUSH_URL": push.push_url}
        cluster = groups.manage("qcluster-onboarding", "qcluster", env=env)
        for mode, endpoint in (("immediate", "/bank-accounts"), ("fast", "/sanctions/screen")):
            hold = services.hold(endpoint)
            runs = [onboarding_start(supplier=s).pk for s in suppliers[:2]] if mode == "immediate" else None
            if runs is None:
                runs = [onboarding_start(supplier=s).pk for s in suppliers[2:]]
            assert hold.arrived.wait(90), f"no step reached {endpoint}\n{cluster.log_tail()}"
            before, held = restart_while_held(own_server, mode, OnboardingRun, runs)
            assert held, f"no run was held while its step waited on {endpoint}"
            hold.release()  # the step's answer arrives after the server came back
            assert_leases_let_go(OnboardingRun, before, held)

        ids = [r.pk for r in OnboardingRun.objects.filter(supplier__in=suppliers)]

        def finished():
            assert cluster.alive(), cluster.log_tail()
            return not OnboardingRun.objects.filter(pk__in=ids, status__in=OnboardingRun.ACTIVE).exists()

        wait_until(lambda: reconnecting(finished), timeout=180, message="every onboarding run to finish")

    for run in OnboardingRun.objects.filter(pk__in=ids):
        assert run.status == OnboardingRun.Status.COMPLETED, (run.status, run.reason)
        assert run.owner is None
        receipts = list(StepReceipt.objects.filter(run=run))
        assert sorted(r.step for r in receipts) == sorted(_step_names(run))
        by_step = {r.step: r for r in receipts}
        for model in (VendorRecord, PaymentTerms, BankAccount):
            row = model.objects.get(supplier=run.supplier)
            # Written by the claim that wrote a receipt, never by one that lost its lease.
            assert row.run_id == run.pk and row.fence in {r.fence for r in by_step.values()}
        attempts = RunAttempt.objects.filter(run=run)
        assert not attempts.filter(outcome=RunAttempt.Outcome.RUNNING).exists()
        assert attempts.filter(outcome=RunAttempt.Outcome.COMPLETED).count() == 1
    # Every call the steps made reached the services' work once by its key (repeats are replays).
    stats = services.stats()
    assert all(count >= 1 for count in stats["keys"].values())
    print(f"onboarding with two restarts: {stats['requests']} requests, {stats['replays']} replays")


def _step_names(run):
    from onboarding.steps.plan import load_plan

    return [step.name for step in load_plan(run.plan)]

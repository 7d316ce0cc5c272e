"""SIGTERM to a cluster's main pid: in-flight work finishes or gives its lease back; no lease is left behind."""

import os
import signal

import pytest

from notifications.models import Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from onboarding.models import OnboardingRun, RunAttempt, Supplier
from onboarding.services import onboarding_start
from onboarding.testing.fake_services import FakeConfig, FakeSupplierServices
from tools.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_sigterm_to_the_cluster__in_flight_work_finishes_or_releases_its_leases(groups, worker_env):
    supplier = Supplier.objects.create(
        legal_name="Slow Supplies Ltd",
        country="GB",
        tax_id="GB980780684",  # well-formed: validation refuses a bad checksum before any run
        contact_email="ap@slow.example",
        device_token="slow-device",
        iban="GB33BUKB20201555555555",
    )
    # Slow services keep a run and a batch in flight; a long lease means a lease abandoned by the
    # stopping cluster would still be live when we look, so "no live lease" proves it was given back.
    with FakeSupplierServices(config=FakeConfig(latency=1.0)) as services, FakePushProvider(latency_ms=500) as push:
        env = {
            **worker_env,
            "WEAVE_SUPPLIER_API_URL": services.url,
            "WEAVE_PUSH_URL": push.push_url,
            "WEAVE_ONBOARDING_LEASE_TTL": "60",
            "WEAVE_PUSH_LEASE_TTL": "60",
            "WEAVE_PUSH_CONCURRENCY": "2",
        }
        cluster = groups.manage("qcluster", "qcluster", env=env)
        run = onboarding_start(supplier=supplier, started_by=None)
        for i in range(20):
            notification_create(device_token=f"device-{i}", title=f"Message {i}", body="")

        def in_flight() -> bool:
            assert cluster.alive(), cluster.log_tail()
            return OnboardingRun.objects.live().filter(pk=run.pk).exists() and Notification.objects.live().exists()

        wait_until(in_flight, timeout=90, message="a run and a notification batch to be in flight")

        os.kill(cluster.popen.pid, signal.SIGTERM)  # the main pid only, as a process manager would
        cluster.popen.wait(timeout=120)
        wait_until(lambda: not cluster.descendants(), timeout=30, message="the cluster's workers to exit")

    assert not OnboardingRun.objects.live().exists(), "the stopped cluster left an onboarding lease behind"
    assert not Notification.objects.live().exists(), "the stopped cluster left a notification lease behind"
    run.refresh_from_db()
    assert run.status in (OnboardingRun.Status.COMPLETED, OnboardingRun.Status.PENDING)
    # Its attempt ended one way or the other: never left "running" by a clean stop.
    assert not RunAttempt.objects.filter(run=run, outcome=RunAttempt.Outcome.RUNNING).exists()
    for row in Notification.objects.all():
        assert row.status in (Notification.Status.DELIVERED, Notification.Status.PENDING) and row.owner is None

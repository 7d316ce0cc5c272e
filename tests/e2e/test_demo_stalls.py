"""The demo's stall fault (`manage.py weave_demo_stalls`) really produces a blocked attempt in a real qcluster."""

import re

import pytest

from onboarding.models import OnboardingRun, RunAttempt, Supplier
from onboarding.services import onboarding_start
from onboarding.testing.fake_services import FakeConfig, FakeSupplierServices
from onboarding.testing.numbers import german_iban, german_vat_number
from tools.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_stall__the_frozen_worker_is_taken_over_and_its_attempt_ends_blocked(groups, worker_env):
    suppliers = [
        Supplier.objects.create(
            legal_name=f"Stalled Supplier {n}",
            country="DE",
            tax_id=german_vat_number(n),  # well-formed: validation refuses a bad checksum before any run
            contact_email=f"ap{n}@stall.example",
            iban=german_iban(n),
        )
        for n in range(3)
    ]
    # Slow services keep each run under its lease for a few seconds: time for the stall to find one.
    with FakeSupplierServices(config=FakeConfig(latency=0.4)) as services:
        env = {**worker_env, "WEAVE_SUPPLIER_API_URL": services.url, "WEAVE_ONBOARDING_LEASE_TTL": "3"}
        cluster = groups.manage("qcluster", "qcluster", env=env)
        stalls = groups.manage("stalls", "weave_demo_stalls", "--every", "0.01", "--stalls", "1", "--no-push", env=env)
        for supplier in suppliers:
            onboarding_start(supplier=supplier)

        def done() -> bool:
            assert cluster.alive(), cluster.log_tail()
            finished = OnboardingRun.objects.exclude(status__in=OnboardingRun.ACTIVE).count() == len(suppliers)
            return finished and RunAttempt.objects.filter(outcome=RunAttempt.Outcome.BLOCKED).exists()

        try:
            wait_until(done, timeout=120, interval=0.5, message="a blocked attempt and every run finished")
        except TimeoutError:
            pytest.fail(f"stalls log:\n{stalls.log_tail()}\nqcluster log:\n{cluster.log_tail(40)}")

    blocked = RunAttempt.objects.get(outcome=RunAttempt.Outcome.BLOCKED)
    run = blocked.run
    # The run was taken over under a newer fence and still completed; the frozen attempt wrote nothing more.
    assert run.status == OnboardingRun.Status.COMPLETED and run.fence > blocked.fence
    assert "fence" in blocked.reason and blocked.ended_at is not None
    assert not run.receipts.filter(fence=blocked.fence, completed_at__gt=blocked.ended_at).exists()


def test_stall__a_frozen_push_worker_is_taken_over_and_its_answers_refused(groups, worker_env):
    from notifications.models import DeliveryAttempt, Notification
    from notifications.testing.fake_provider import FakePushProvider

    # A slow provider keeps the batch in flight for a while: time for the stall to catch its holder.
    with FakePushProvider(latency_ms=400) as push:
        env = {**worker_env, "WEAVE_PUSH_URL": push.push_url, "WEAVE_PUSH_LEASE_TTL": "4", "WEAVE_PUSH_TIMEOUT": "2"}
        cluster = groups.manage("qcluster", "qcluster", env=env)
        args = ["--every", "0.01", "--stalls", "1", "--push-only"]
        stalls = groups.manage("stalls", "weave_demo_stalls", *args, env=env)

        def frozen() -> tuple[int, int, str] | None:
            """The row, fence and owner the stall froze, from its log."""
            found = re.search(r"\((push:\S+)\) holding notification (\d+) .* at fence (\d+)", stalls.log_tail(400))
            return (int(found[2]), int(found[3]), found[1]) if found else None

        def refused(owner: str) -> bool:
            """The frozen worker's drain ended refused: an answer's guard (`lease_lost`) or, when the freeze
            caught it before it sent, its lease renewal (`skipped`: nothing sent, so nothing recorded)."""
            drains = rf"event=drain job=notification id=- owner={re.escape(owner)} .*"
            for line in re.findall(drains, cluster.log_tail(2000)):
                counts = dict(re.findall(r"(lease_lost|skipped)=(\d+)", line))
                if int(counts.get("lease_lost", 0)) + int(counts.get("skipped", 0)):
                    return True
            return False

        def done() -> bool:
            assert cluster.alive(), cluster.log_tail()
            rows = Notification.objects.filter(device_token__startswith="demo-device-stall-")
            delivered = rows.exists() and not rows.exclude(status="delivered").exists()
            caught = frozen()
            return delivered and caught is not None and refused(caught[2])

        try:
            wait_until(done, timeout=120, interval=0.5, message="the stalled batch refused and delivered by another")
        except TimeoutError:
            pytest.fail(f"stalls log:\n{stalls.log_tail()}\nqcluster log:\n{cluster.log_tail(40)}")

    pk, fence, _ = frozen() or (0, 0, "")
    row = Notification.objects.get(pk=pk)
    # Taken over under a newer fence and delivered there. The frozen worker's drain is over (its report is
    # logged last), and of its fence nothing landed but the record of a refusal.
    assert row.fence > fence and row.status == "delivered"
    assert DeliveryAttempt.objects.filter(notification=row, outcome="delivered", fence__gt=fence).exists()
    assert not DeliveryAttempt.objects.filter(notification=row, fence=fence).exclude(outcome="lease_lost").exists()

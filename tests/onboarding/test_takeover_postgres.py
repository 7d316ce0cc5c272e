"""The seed's test: a real PostgreSQL, real time, a lease that expires in a blink.

Worker A holds a 0.3 s lease and stalls inside step 5's external call (the fake service holds the
request). A stalled process renews nothing, so A runs without a background heartbeat here: it renews
before the work and before the save, as a SIGSTOPped worker would. The test waits past the lease by
the database clock, worker B claims (fence A + 1) and completes the step, then A is let go.
"""

import threading
import time

import pytest
from django.db import connections

from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, RunAttempt, StepReceipt, VendorRecord
from onboarding.runner import claim_attempt
from onboarding.steps import idempotency_key
from onboarding.steps.builtin import STEPS
from tests.factories import OnboardingRunFactory
from weave.leases import LeaseLost, default_clock

SHORT = 0.3
BANK = STEPS[4]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_takeover__stale_worker_save_is_refused_and_writes_nothing(fake_services):
    run = OnboardingRunFactory()
    # Steps 1-4 done by an earlier attempt that gave the run back, so A starts at step 5.
    earlier = claim_attempt(run.pk, ttl=30)
    for step in STEPS[:4]:
        earlier.run_step(step)
    earlier.give_back("Stopped after step 4 for the test.", requeue=False)
    vendor_before = list(VendorRecord.objects.values_list("pk", "fence"))
    terms_before = list(PaymentTerms.objects.values_list("pk", "fence"))

    hold = fake_services.hold("/bank-accounts")
    a = claim_attempt(run.pk, ttl=SHORT, background=False)
    outcome: dict[str, str] = {}

    def worker_a():
        try:
            outcome["a"] = a.execute()
        finally:
            connections.close_all()  # this thread's own connection

    thread = threading.Thread(target=worker_a, name="worker-a")
    thread.start()
    try:
        assert hold.arrived.wait(10), "worker A never reached the bank-account call"
        # Real time, judged by the database clock: wait until A's lease has lapsed.
        deadline = time.monotonic() + 10
        while OnboardingRun.objects.live(default_clock).filter(pk=run.pk).exists():
            assert time.monotonic() < deadline, "A's lease never expired"
            time.sleep(0.05)

        b = claim_attempt(run.pk, ttl=30)
        assert b.lease.fence == a.lease.fence + 1
        b.run_step(BANK)
    finally:
        hold.release()
        thread.join(20)
    assert not thread.is_alive()

    # A's save was refused: its guard matches 0 rows, and the attempt ended blocked.
    assert outcome["a"] == "blocked"
    stale = OnboardingRun.objects.held_by(a.lease, default_clock).filter(phase="set_payment_terms", status="running")
    assert stale.update(phase=BANK.name) == 0
    with pytest.raises(LeaseLost):
        OnboardingRun.objects.guarded_update(a.lease, expect={"phase": "set_payment_terms"}, phase=BANK.name)
    attempt_a = RunAttempt.objects.get(run=run, fence=a.lease.fence)
    assert attempt_a.outcome == "blocked"
    assert f"at fence {b.lease.fence}" in attempt_a.reason and b.lease.owner in attempt_a.reason

    # B's save landed: one receipt for the step, B's.
    receipt = StepReceipt.objects.get(run=run, step=BANK.name)
    assert (receipt.fence, receipt.owner) == (b.lease.fence, b.lease.owner)
    assert StepReceipt.objects.filter(run=run).count() == 5
    assert not StepReceipt.objects.filter(fence=a.lease.fence).exists()

    # Nothing from A in the purchase and setup tables.
    assert list(BankAccount.objects.values_list("run", "fence")) == [(run.pk, b.lease.fence)]
    assert list(VendorRecord.objects.values_list("pk", "fence")) == vendor_before
    assert list(PaymentTerms.objects.values_list("pk", "fence")) == terms_before
    for table in (VendorRecord, PaymentTerms, BankAccount):
        assert not table.objects.filter(fence=a.lease.fence).exists()

    # The run is B's.
    row = OnboardingRun.objects.get(pk=run.pk)
    assert (row.owner, row.fence, row.phase, row.status) == (b.lease.owner, b.lease.fence, BANK.name, "running")

    # The service saw A's and B's call under one key and did the work once.
    bank = fake_services.stats()["endpoints"]["/bank-accounts"]
    assert (bank["requests"], bank["unique_keys"]) == (2, 1)
    assert fake_services.stats()["keys"][idempotency_key(run.pk, BANK.name)] == 2

"""PostgreSQL, real time: an onboarding worker cut off from the database by a silent link (issue 17).

Worker A's connections (its own and its heartbeat's) go through a silent TCP proxy and carry the
worker session limits; worker B and the test talk to PostgreSQL directly. The link falls silent
right after a chosen statement landed. B keeps trying to claim with no other traffic. Each test shows:
B gets the run once A's lease could expire, with a full TTL of its own (how soon is reported to the
bench, `bench/timings.py`, against its TTL + 5 s target); after healing, A writes nothing but its own
attempt's ending; the run's story says what happened.
"""

import threading
from datetime import timedelta

import pytest

from onboarding.explain import explain_run
from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.runner import claim_attempt, run_onboarding
from onboarding.steps import Step
from tests.factories import OnboardingRunFactory
from tests.partitions.conftest import RECOVERY_SLACK, RECOVERY_WAIT, TTL, poll, run_in_thread
from tests.timings import report_timing
from weave.leases import LeaseBusy, NotClaimable

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
RUNS = OnboardingRun._meta.db_table
work_may_end = threading.Event()


def _waiting_work(ctx):
    # Stands for a slow external call: A's heartbeat keeps renewing meanwhile (bounded wait).
    work_may_end.wait(30)
    return {"waited": True}


QUICK = (Step("alpha", "Alpha"), Step("beta", "Beta"))
SLOW = (Step("alpha", "Alpha", work=_waiting_work), Step("beta", "Beta"))


def _take_over(run_id, steps, a_expires):
    """B claims as soon as the database lets it (no other traffic), then finishes the run."""
    b = poll(
        lambda: claim_attempt(run_id, owner="worker-b", ttl=30, background=False, steps=steps),
        refusals=(LeaseBusy, NotClaimable),
        seconds=RECOVERY_WAIT,
    )
    row = OnboardingRun.objects.values("lease_expires_at", "fence").get(pk=run_id)
    claimed_at = row["lease_expires_at"] - timedelta(seconds=30)
    if a_expires is not None:
        took = (claimed_at - a_expires).total_seconds()
        report_timing("onboarding partition: B's claim after A's lease could expire", took,
                      target=TTL + RECOVERY_SLACK, what="seconds")  # fmt: skip
    assert b.lease.expires_at >= claimed_at + timedelta(seconds=30), "B's lease was born short"
    for step in b.remaining_steps():
        b.run_step(step)
    b.complete()
    return b


class WorkerA:
    """Worker A on its own thread: claim, keep the attempt for the test to look at, execute."""

    def __init__(self, run_id, steps):
        self.attempt = None
        self.thread, self.result = run_in_thread("worker-a", lambda: self._run(run_id, steps))

    def _run(self, run_id, steps):
        self.attempt = claim_attempt(run_id, owner="worker-a", ttl=TTL, steps=steps)
        return self.attempt.execute()


def test_partition_during_step_save__server_aborts_it_and_b_takes_over(cut_off):
    run = OnboardingRunFactory()
    cut = cut_off("worker-a", "heartbeat-")
    cut.after(rf'UPDATE "{RUNS}" SET "phase"')  # A's guarded save of alpha landed; its COMMIT will not
    worker = WorkerA(run.pk, QUICK)
    thread, result = worker.thread, worker.result
    cut.wait_cut()
    a = worker.attempt
    a_expires = OnboardingRun.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)

    b = _take_over(run.pk, QUICK, a_expires)
    assert b.lease.fence == a.lease.fence + 1
    cut.proxy.heal()
    thread.join(30)
    assert not thread.is_alive() and "error" not in result, result

    assert result["value"] == "blocked"
    ending = RunAttempt.objects.get(run=run, fence=a.lease.fence)
    assert ending.outcome == "blocked"
    assert "Cut off from the database at alpha" in ending.reason
    assert "aborted by the server" in ending.reason
    assert f"worker-b at fence {b.lease.fence}" in ending.reason
    # A's save never landed: every receipt is B's, and the run is B's completed run.
    assert set(StepReceipt.objects.filter(run=run).values_list("step", "fence")) == {
        ("alpha", b.lease.fence),
        ("beta", b.lease.fence),
    }
    run.refresh_from_db()
    assert (run.status, run.owner, run.fence) == ("completed", None, b.lease.fence)
    story = explain_run(run.pk).as_text()
    assert "Cut off from the database at alpha" in story and f"fence {b.lease.fence}" in story


def test_partition_during_renewal__heartbeat_failure_wins_and_a_writes_only_its_ending(cut_off):
    work_may_end.clear()
    run = OnboardingRunFactory()
    cut = cut_off("worker-a", "heartbeat-")
    # The background heartbeat's renewal landed; the link then falls silent under A and its heartbeat.
    cut.after(rf'UPDATE "{RUNS}" SET "lease_expires_at"', thread_prefix="heartbeat-")
    worker = WorkerA(run.pk, SLOW)
    thread, result = worker.thread, worker.result
    try:
        cut.wait_cut()
        a = worker.attempt
        a_expires = OnboardingRun.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)
        b = _take_over(run.pk, QUICK, a_expires)
        cut.proxy.heal()
    finally:
        work_may_end.set()
    thread.join(30)
    assert not thread.is_alive() and "error" not in result, result

    assert result["value"] == "blocked"
    assert a.heartbeats["alpha"].failed, "the heartbeat's failure must win over the work's result"
    ending = RunAttempt.objects.get(run=run, fence=a.lease.fence)
    assert ending.outcome == "blocked" and f"fence {b.lease.fence}" in ending.reason
    assert not StepReceipt.objects.filter(run=run, fence=a.lease.fence).exists()
    run.refresh_from_db()
    assert (run.status, run.fence) == ("completed", b.lease.fence)


def test_partition_during_claim__server_rolls_the_claim_back_and_a_writes_nothing(cut_off):
    run = OnboardingRunFactory()
    cut = cut_off("worker-a")
    # A's claim UPDATE ran (A even read its fence back); its COMMIT meets the silent link.
    cut.after(rf'UPDATE "{RUNS}" SET "owner"')
    thread, result = run_in_thread("worker-a", lambda: run_onboarding(run.pk, owner="worker-a", ttl=TTL, steps=QUICK))
    partitioned_at = cut.wait_cut()

    # The claim never committed, so no lease of A's could outlive it: measure from the cut.
    b = _take_over(run.pk, QUICK, partitioned_at)
    cut.proxy.heal()
    thread.join(30)
    assert not thread.is_alive() and "error" not in result, result

    assert result["value"] == "cut_off"
    # A wrote nothing: the only attempt is B's, and B got the first fence.
    assert list(RunAttempt.objects.filter(run=run).values_list("owner", "outcome")) == [("worker-b", "completed")]
    assert b.lease.fence == 1
    run.refresh_from_db()
    assert run.status == "completed"

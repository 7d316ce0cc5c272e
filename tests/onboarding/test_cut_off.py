"""An onboarding attempt whose database link fails mid-attempt ends itself honestly (issue 17).

The link failure is simulated at the commit: the COMMIT lands, then the driver reports the
connection lost, as when the link dies between the server's commit and its reply. (The PostgreSQL
tests in tests/partitions/ cut a real link with the silent proxy.)
"""

import pytest
from django.db import OperationalError, connection

from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.runner import run_onboarding
from onboarding.steps import Step
from tests.factories import OnboardingRunFactory

pytestmark = pytest.mark.django_db(transaction=True)
STEPS = (Step("alpha", "Alpha"), Step("beta", "Beta"))


def _reply_lost_after_commit(monkeypatch, *, on_commit_number: int):
    real = connection._commit
    seen = {"commits": 0}

    def commit_then_lose_the_reply():
        real()
        seen["commits"] += 1
        if seen["commits"] == on_commit_number:
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(connection, "_commit", commit_then_lose_the_reply)


def test_claim_reply_lost__the_landed_claim_is_given_back_and_said_so(monkeypatch):
    run = OnboardingRunFactory()
    _reply_lost_after_commit(monkeypatch, on_commit_number=1)  # the claim's own transaction
    assert run_onboarding(run.pk, owner="worker-a", ttl=30, steps=STEPS) == "released"
    row = OnboardingRun.objects.values("owner", "fence", "lease_expires_at").get(pk=run.pk)
    assert row == {"owner": None, "fence": 1, "lease_expires_at": None}
    (ending,) = RunAttempt.objects.filter(run=run)
    assert (ending.fence, ending.outcome) == (1, "released")
    assert "claim landed but its reply was cut off" in ending.reason


def test_save_reply_lost__the_landed_save_is_read_back_not_assumed(monkeypatch):
    run = OnboardingRunFactory()
    # 1: the claim, 2: status running + attempt row, 3: alpha's save (lands; its reply is lost).
    _reply_lost_after_commit(monkeypatch, on_commit_number=3)
    assert (
        run_onboarding(run.pk, owner="worker-a", ttl=30, steps=STEPS) == "released"
    )  # our lease was still live: the run is given back
    assert list(StepReceipt.objects.filter(run=run).values_list("step", "fence")) == [("alpha", 1)]
    ending = RunAttempt.objects.get(run=run, fence=1)
    assert ending.outcome == "released"
    assert "Cut off from the database at alpha" in ending.reason
    assert "its save of alpha had landed" in ending.reason
    run.refresh_from_db()
    assert (run.owner, run.phase, run.status) == (None, "alpha", "pending")


def test_start_cut_off__the_attempt_is_written_afresh_when_its_opening_never_landed(monkeypatch):
    run = OnboardingRunFactory()
    real = connection._commit
    seen = {"commits": 0}

    def lose_the_second_commit():
        seen["commits"] += 1
        if seen["commits"] == 2:  # status running + attempt row: rolled back, as the server would
            connection.connection.rollback()
            raise OperationalError("terminating connection due to idle-in-transaction timeout")
        real()

    monkeypatch.setattr(connection, "_commit", lose_the_second_commit)
    assert run_onboarding(run.pk, owner="worker-a", ttl=30, steps=STEPS) == "released"
    (ending,) = RunAttempt.objects.filter(run=run)
    assert (ending.fence, ending.outcome) == (1, "released")
    assert "Cut off from the database right after the claim" in ending.reason
    assert "nothing of it landed" in ending.reason
    assert OnboardingRun.objects.values_list("owner", flat=True).get(pk=run.pk) is None

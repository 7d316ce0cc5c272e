"""A worker killed mid-attempt writes nothing; the attempt that takes the job over records it (weave.jobs.takeover)."""

from datetime import timedelta

import pytest
from django.core.management import call_command

from tests.jobs.shipping.carrier import during_booking
from tests.jobs.shipping.models import Booking, Shipment
from weave.jobs import get
from weave.jobs.batch import run_batches
from weave.jobs.console import findings, outcome_counts
from weave.jobs.explain import explain_job
from weave.jobs.runner import run_job
from weave.jobs.services import job_retry
from weave.jobs.takeover import guessed_by_a_takeover
from weave.models import JobAttempt

pytestmark = pytest.mark.django_db


class WorkerDied(BaseException):
    """Stands for the worker process being killed (SIGKILL) mid-step: nothing after it runs, nothing is recorded."""


def die_after(clock, seconds):
    """A hook for the booking step: work `seconds` (less than ttl/3: the heartbeat's thread stays asleep),
    renew once by hand, then the process dies."""

    def hook(ctx, hb):
        clock.advance(seconds)
        hb.beat()  # the lease now ends `seconds` later than the claim's
        raise WorkerDied

    return hook


def attempts_of(shipment):
    return list(JobAttempt.objects.filter(job_type="shipment", job_id=str(shipment.pk)).order_by("number", "pk"))


def killed_mid_booking(clock, shipment):
    """Attempt 1 by "killed" dies in the booking step; return its claim time and its lease's last expiry."""
    ttl = get("shipment").lease_ttl()
    claimed = clock.current
    during_booking.append(die_after(clock, 4))
    with pytest.raises(WorkerDied):
        run_job("shipment", shipment.pk, owner="killed", clock=clock)
    during_booking.clear()
    assert attempts_of(shipment) == []  # the dead worker wrote no record of its attempt
    expiry = Shipment.objects.get(pk=shipment.pk).lease_expires_at
    assert expiry == claimed + timedelta(seconds=4 + ttl)
    clock.advance(ttl + 1)  # its lease lapses
    return claimed, expiry


def test_takeover__records_the_killed_workers_attempt_as_blocked_with_its_owner_fence_and_times(clock):
    shipment = Shipment.objects.create(parcel="books")
    claimed, expiry = killed_mid_booking(clock, shipment)
    took_over = clock.current
    assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "done"
    lost, done = attempts_of(shipment)
    assert (lost.number, lost.owner, lost.fence, lost.outcome) == (1, "killed", 1, "blocked")
    assert (done.number, done.owner, done.fence, done.outcome) == (2, "rival", 2, "done")
    # Database times: it started at its claim, and is dated when the takeover found it ended.
    assert lost.started_at == claimed and lost.finished_at == took_over
    assert "ended no later than its lease's expiry at " + expiry.strftime("%H:%M:%S.%f")[:-3] in lost.reason
    assert "rival took the job over at fence 2" in lost.reason
    assert Booking.objects.get().written_by == "rival"


def test_takeover__the_reasons_and_the_holder_line_give_their_times_with_the_zone(clock):
    """A time inside a reason is read without the timeline's column beside it: it names its zone too."""
    shipment = Shipment.objects.create(parcel="books")
    _claimed, expiry = killed_mid_booking(clock, shipment)
    expired = f"killed at fence 1, lease expired at {expiry.strftime('%H:%M:%S.%f')[:-3]} UTC"
    assert expired in explain_job("shipment", Shipment, shipment.pk, clock=clock).as_text()  # by the test's clock
    assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "done"
    lost, _done = attempts_of(shipment)
    assert f"lease's expiry at {expiry.strftime('%H:%M:%S.%f')[:-3]} UTC (database time)" in lost.reason


def test_takeover__the_guess_does_not_rule_out_a_stalled_worker_and_an_older_guess_is_still_known(clock):
    """The takeover cannot tell a dead worker from a stalled one (which would still write its own account)."""
    shipment = Shipment.objects.create(parcel="books")
    killed_mid_booking(clock, shipment)
    assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "done"
    lost, _done = attempts_of(shipment)
    assert lost.reason.startswith("No finish: its worker stopped, crashed or stalled while holding the job.")
    older = "No finish: its worker stopped or crashed while holding the job. It ended no later than ..."
    JobAttempt.objects.filter(pk=lost.pk).update(reason=older)  # as an earlier version wrote it
    assert JobAttempt.objects.filter(guessed_by_a_takeover(), pk=lost.pk).exists()


def test_takeover__the_record_feeds_the_panel_counts_the_findings_and_the_story(clock, capsys):
    shipment = Shipment.objects.create(parcel="books")
    killed_mid_booking(clock, shipment)
    assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "done"
    jt = get("shipment")
    counts = outcome_counts(jt, clock.current - timedelta(hours=1))
    assert (counts["blocked"], counts["done"]) == (1, 1)
    (found,) = [f for f in findings(clock.current) if "shipment" in f.text]  # the dashboard's verdict
    assert found.level == "degraded" and "1 shipment attempt in the last hour" in found.text
    assert "no later than its lease&#x27;s expiry" in found.text  # escaped: the verdict is HTML
    call_command("weave_explain", "shipment", str(shipment.pk))
    out = capsys.readouterr().out
    assert "no end recorded" not in out  # the real record, not the line for an attempt without one
    assert "2 attempts;" in out and "never ended" not in out
    assert "attempt 1: fence 1 claimed by killed" in out and "1 attempt lost its lease" in out


def test_takeover__a_batch_drain_records_it_too(clock):
    shipment = Shipment.objects.create(parcel="books")
    killed_mid_booking(clock, shipment)
    report = run_batches("shipment", Shipment.objects.due(clock).order_by("pk"), budget=60, owner="drain", clock=clock)
    assert report.outcomes.get("done") == 1
    lost, done = attempts_of(shipment)
    assert (lost.owner, lost.fence, lost.outcome) == ("killed", 1, "blocked")
    assert (done.owner, done.fence, done.outcome) == ("drain", 2, "done")


def test_takeover__an_attempt_that_recorded_its_own_end_is_not_recorded_twice(clock):
    shipment = Shipment.objects.create(parcel="books")
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "done"
    Shipment.objects.filter(pk=shipment.pk).update(state="pending")  # asked again, as an operator's retry does
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    assert [(a.number, a.owner) for a in attempts_of(shipment)] == [(1, "w1"), (2, "w2")]  # a free row: no takeover


def test_takeover__a_stalled_worker_that_wakes_up_puts_its_own_account_in_place_of_the_guess(clock):
    """The takeover guesses the worker died; it had only stalled, and says where it lost the lease."""
    shipment = Shipment.objects.create(parcel="books")
    ttl = get("shipment").lease_ttl()

    def stall_while_a_rival_takes_over(ctx, hb):
        during_booking.clear()
        hb.stop()
        clock.advance(ttl + 1)
        assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "done"
        guess = JobAttempt.objects.get(job_id=str(shipment.pk), number=1)
        assert guess.owner == "stale" and guess.reason.startswith("No finish: its worker stopped, crashed or stalled")
        clock.advance(1)

    during_booking.append(stall_while_a_rival_takes_over)
    woke = clock.current + timedelta(seconds=ttl + 2)
    assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"
    lost, done = attempts_of(shipment)  # still one record of attempt 1
    assert (lost.owner, lost.fence, lost.outcome, done.owner) == ("stale", 1, "blocked", "rival")
    assert lost.reason.startswith("Lease lost at step book") and "No finish" not in lost.reason
    assert lost.finished_at == woke  # its own end, by the clock, once it woke up


def test_takeover__a_taken_over_row_given_back_unstarted_keeps_the_dead_attempts_record(clock):
    """The drain's budget ends before it starts the row it took over: the row goes back free (its
    claim undone), so the next claim would find no previous holder; the record is written first."""
    first = Shipment.objects.create(parcel="first")
    shipment = Shipment.objects.create(parcel="books")
    killed_mid_booking(clock, shipment)
    during_booking.append(lambda ctx, hb: clock.advance(6))  # the first row spends the drain's budget
    due = Shipment.objects.due(clock).order_by("pk")
    report = run_batches("shipment", due, budget=5, owner="drain", clock=clock)
    assert report.outcomes == {"done": 1} and report.more
    assert Shipment.objects.get(pk=first.pk).state == "done"
    row = Shipment.objects.get(pk=shipment.pk)
    assert (row.owner, row.state, row.attempts) == (None, "pending", 1)  # given back: its claim undone
    lost, given_back = attempts_of(shipment)  # the dead attempt's record, and the give-back's (no attempt)
    assert (lost.number, lost.owner, lost.fence, lost.outcome) == (1, "killed", 1, "blocked")
    assert (given_back.number, given_back.owner, given_back.fence, given_back.outcome) == (2, "drain", 2, "released")
    during_booking.clear()
    assert run_job("shipment", shipment.pk, owner="w3", clock=clock) == "done"
    assert [(a.number, a.owner, a.outcome) for a in attempts_of(shipment)] == [
        (1, "killed", "blocked"),
        (2, "drain", "released"),
        (2, "w3", "done"),
    ]


def killed_at_every_attempt(clock, shipment, times):
    """`times` attempts in a row by "killed-1", "killed-2", ... die in the booking step; each lease lapses."""
    ttl = get("shipment").lease_ttl()
    for n in range(1, times + 1):
        during_booking.append(die_after(clock, 1))
        with pytest.raises(WorkerDied):
            run_job("shipment", shipment.pk, owner=f"killed-{n}", clock=clock)
        during_booking.clear()
        clock.advance(ttl + 1)


def test_takeover__a_job_that_kills_its_worker_every_time_fails_once_its_retry_policy_is_spent(clock, fresh_carrier):
    """A poison job (out of memory, a crash in a native library) is not started again at every lapse forever:
    each dead attempt counts as a try, and the claim after the last one the policy allows fails the job."""
    shipment = Shipment.objects.create(parcel="books")
    assert get("shipment").retry.max_attempts == 3
    killed_at_every_attempt(clock, shipment, 3)
    booked = len(fresh_carrier.calls)
    assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "failed"
    assert len(fresh_carrier.calls) == booked  # the step never ran: no fourth call to the carrier
    row = Shipment.objects.get(pk=shipment.pk)
    assert (row.state, row.owner, row.attempts, row.next_attempt_at) == ("failed", None, 4, None)
    assert not Booking.objects.exists()
    records = attempts_of(shipment)
    assert [(a.number, a.owner, a.outcome) for a in records] == [
        (1, "killed-1", "blocked"),
        (2, "killed-2", "blocked"),
        (3, "killed-3", "blocked"),
        (4, "rival", "failed"),
    ]
    assert records[-1].reason == (
        "Not started: attempt 3 ended without a finish (its worker stopped, crashed or stalled). "
        "Not retried: that was attempt 3 and the retry policy allows 3."
    )
    assert row.last_error == records[-1].reason


def test_takeover__a_dead_attempt_within_the_policy_is_taken_over_and_run(clock):
    shipment = Shipment.objects.create(parcel="books")
    killed_at_every_attempt(clock, shipment, 2)
    assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "done"
    assert Booking.objects.get().written_by == "rival"


def test_takeover__a_batch_drain_fails_a_spent_job_unstarted_and_runs_the_others(clock, fresh_carrier):
    poison = Shipment.objects.create(parcel="poison")
    killed_at_every_attempt(clock, poison, 3)
    healthy = Shipment.objects.create(parcel="books")
    booked = len(fresh_carrier.calls)
    report = run_batches("shipment", Shipment.objects.due(clock).order_by("pk"), budget=60, owner="drain", clock=clock)
    assert report.outcomes == {"failed": 1, "done": 1}
    assert len(fresh_carrier.calls) == booked + 1  # the healthy one's booking only
    assert Shipment.objects.get(pk=poison.pk).state == "failed"
    assert [b.shipment_id for b in Booking.objects.all()] == [healthy.pk]
    (failed,) = [a for a in attempts_of(poison) if a.outcome == "failed"]
    assert failed.owner == "drain" and failed.reason.startswith("Not started: attempt 3 ended without a finish")


def test_takeover__an_operators_retry_gives_the_spent_job_one_more_attempt(clock):
    """As after a failure: the attempts count on, and a Retry starts the job once more, not a new budget."""
    shipment = Shipment.objects.create(parcel="books")
    killed_at_every_attempt(clock, shipment, 3)
    assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "failed"
    job_retry(job_type="shipment", pks=[shipment.pk], clock=clock)
    assert run_job("shipment", shipment.pk, owner="after-retry", clock=clock) == "done"
    assert Booking.objects.get().written_by == "after-retry"

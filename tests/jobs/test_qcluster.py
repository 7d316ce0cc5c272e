"""The same qcluster workers run a site's own job types and its `@task` functions: no new process type."""

import pytest

from tests.e2e.conftest import database_url
from tests.jobs.shipping.background import add
from tests.jobs.shipping.models import Booking, Shipment
from tools.processes import ProcessGroups, wait_until
from weave.tasks.compat import TaskResultStatus

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_task_and_a_job_run_on_a_real_qcluster(tmp_path):
    with ProcessGroups(log_dir=tmp_path / "logs") as groups:
        cluster = groups.manage("qcluster", "qcluster", env={"DATABASE_URL": database_url(), "WEAVE_Q_WORKERS": "2"})
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="qcluster to start")
        result = add.enqueue(20, 22)  # autocommit: the drain is asked for at once
        shipment = Shipment.objects.create(parcel="books")  # the due-time watcher asks for its attempt

        def finished() -> bool:
            assert cluster.alive(), cluster.log_tail()
            result.refresh()
            return result.is_finished and Shipment.objects.get(pk=shipment.pk).state == "done"

        wait_until(finished, timeout=60, message="the task and the job to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    assert Booking.objects.get(shipment=shipment).written_by.startswith("shipment:")


def test_a_task_longer_than_its_lease_finishes_once_on_a_real_qcluster(tmp_path):
    """`sleep_then_note` holds a 2 s lease and works 5 s: the engine's heartbeat keeps it, nobody takes it over."""
    from tests.jobs.shipping.contract import sleep_then_note
    from weave.models import JobAttempt, TaskRow

    notes = tmp_path / "starts.txt"
    with ProcessGroups(log_dir=tmp_path / "logs") as groups:
        cluster = groups.manage("qcluster", "qcluster", env={"DATABASE_URL": database_url(), "WEAVE_Q_WORKERS": "2"})
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="qcluster to start")
        result = sleep_then_note.enqueue(str(notes), 5.0)

        def finished() -> bool:
            assert cluster.alive(), cluster.log_tail()
            result.refresh()
            return result.is_finished

        wait_until(finished, timeout=60, message="the long task to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "slept"
    assert notes.read_text() == "started\n"  # started once: no takeover while it ran
    assert result.attempts == 1 and len(result.worker_ids) == 1 and result.errors == []
    row = TaskRow.objects.get(result_id=result.id)
    assert row.fence == 1 and row.attempts == 1
    (attempt,) = JobAttempt.objects.filter(job_type="task", job_id=str(row.pk))
    assert attempt.outcome == "done"


def test_new_jobs_run_within_about_a_second_of_their_commit_on_a_real_qcluster(tmp_path):
    """The watchers sleep in LISTEN; one created row (autocommit), then twenty made one by one in one
    transaction (one wake-up, after the commit), each run about a second after its commit at most."""
    import time

    from django.db import transaction

    with ProcessGroups(log_dir=tmp_path / "logs") as groups:
        cluster = groups.manage("qcluster", "qcluster", env={"DATABASE_URL": database_url(), "WEAVE_Q_WORKERS": "2"})
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="qcluster to start")
        time.sleep(3)  # past the start-up sweep: the watchers are asleep, waiting for a wake-up

        def all_done(pks: list[int]) -> bool:
            assert cluster.alive(), cluster.log_tail()
            return Shipment.objects.filter(pk__in=pks, state="done").count() == len(pks)

        began = time.monotonic()
        one = Shipment.objects.create(parcel="books")
        wait_until(lambda: all_done([one.pk]), timeout=30, interval=0.02, message="the new job to run")
        single = time.monotonic() - began

        with transaction.atomic():
            many = [Shipment.objects.create(parcel=f"box {n}").pk for n in range(20)]
        began = time.monotonic()
        wait_until(lambda: all_done(many), timeout=30, interval=0.02, message="the twenty new jobs to run")
        twenty = time.monotonic() - began
    print(f"new job done {single:.2f} s after its commit; twenty in one transaction {twenty:.2f} s")
    assert single < 2.0 and twenty < 2.5, (single, twenty)


def test_a_job_attempt_whose_worker_was_killed_is_recorded_by_the_takeover_on_a_real_qcluster(tmp_path, capsys):
    """SIGKILL the worker process mid-step: it writes nothing; the worker that takes the job over once its
    lease lapses records the dead attempt (blocked, its owner, fence and claim time), then finishes the job."""
    import os
    import signal
    from datetime import timedelta

    from django.core.management import call_command
    from django.db import connection

    from tests.jobs.shipping.carrier import HANG
    from weave.jobs.console import findings
    from weave.leases.clock import read_database_now
    from weave.models import JobAttempt

    marker = tmp_path / "booking-pid"
    with ProcessGroups(log_dir=tmp_path / "logs") as groups:
        env = {
            "DATABASE_URL": database_url(),
            "WEAVE_Q_WORKERS": "2",
            "WEAVE_LEASE_TTL": "3",
            "WEAVE_PUSH_LEASE_TTL": "30",
        }
        cluster = groups.manage("qcluster", "qcluster", env=env)
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="qcluster to start")
        shipment = Shipment.objects.create(parcel=f"{HANG}{marker}")
        wait_until(lambda: marker.exists() and marker.read_text().endswith("\n"), timeout=60, message="the booking")
        pid = int(marker.read_text())
        assert pid in cluster.descendants(), "the booking must run in a worker process of this cluster"
        held = Shipment.objects.get(pk=shipment.pk)
        assert held.fence == 1 and f":{pid}:" in held.owner
        os.kill(pid, signal.SIGKILL)
        killed_at = read_database_now(connection)

        def done() -> bool:
            assert cluster.alive(), cluster.log_tail()
            return Shipment.objects.get(pk=shipment.pk).state == "done"

        wait_until(done, timeout=60, message="another worker to take the job over and finish it")
    lost, finished = JobAttempt.objects.filter(job_type="shipment", job_id=str(shipment.pk)).order_by("number")
    assert (lost.number, lost.owner, lost.fence, lost.outcome) == (1, held.owner, 1, "blocked")
    assert (finished.number, finished.fence, finished.outcome) == (2, 2, "done") and finished.owner != held.owner
    # Database times: the dead attempt started at its claim, before the kill; the takeover came after the kill.
    assert lost.started_at < killed_at < finished.started_at <= lost.finished_at + timedelta(seconds=1)
    assert "ended no later than its lease's expiry" in lost.reason and "took the job over at fence 2" in lost.reason
    assert Booking.objects.get(shipment=shipment).written_by == finished.owner  # the dead worker wrote nothing
    (found,) = [f for f in findings(read_database_now(connection)) if "shipment" in f.text]
    assert found.level == "degraded" and "1 shipment attempt in the last hour" in found.text
    call_command("weave_explain", "shipment", str(shipment.pk))
    story = capsys.readouterr().out
    assert held.owner in story and "blocked" in story


def test_a_job_that_kills_its_worker_every_time_fails_after_its_retry_policy_on_a_real_qcluster(tmp_path):
    """Each booking of the poison parcel SIGKILLs its worker process. The takeovers count the dead attempts:
    after the third (the shipment type allows 3), the next claim fails the job unstarted, and the cluster,
    its workers respawned, goes on running other jobs."""
    from tests.jobs.shipping.carrier import POISON
    from weave.models import JobAttempt

    pids = tmp_path / "poisoned-pids"
    with ProcessGroups(log_dir=tmp_path / "logs") as groups:
        env = {"DATABASE_URL": database_url(), "WEAVE_Q_WORKERS": "2", "WEAVE_LEASE_TTL": "3"}
        env["WEAVE_PUSH_LEASE_TTL"] = "30"  # above the push timeout, which the system checks ask for
        cluster = groups.manage("qcluster", "qcluster", env=env)
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="qcluster to start")
        poison = Shipment.objects.create(parcel=f"{POISON}{pids}")

        def failed() -> bool:
            assert cluster.alive(), cluster.log_tail()
            return Shipment.objects.get(pk=poison.pk).state == "failed"

        wait_until(failed, timeout=120, message="the poison job to fail once its three attempts died")
        healthy = Shipment.objects.create(parcel="books")
        wait_until(lambda: Shipment.objects.get(pk=healthy.pk).state == "done", timeout=60, message="a healthy job")
    died = pids.read_text().split()
    assert len(died) == 3 and len(set(died)) == 3  # three worker processes died, one per attempt
    records = list(JobAttempt.objects.filter(job_type="shipment", job_id=str(poison.pk)).order_by("number", "pk"))
    assert [(r.number, r.outcome) for r in records] == [(1, "blocked"), (2, "blocked"), (3, "blocked"), (4, "failed")]
    assert records[-1].reason.startswith("Not started: attempt 3 ended without a finish")
    assert not Booking.objects.filter(shipment=poison).exists()

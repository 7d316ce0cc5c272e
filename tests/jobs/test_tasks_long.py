"""Long tasks on `WeaveBackend`: the engine's heartbeat, the timeout, and bounded takeovers (on the fake clock)."""

from datetime import timedelta

import pytest

from tests.jobs.shipping.background import add
from tests.jobs.shipping.contract import at_most_twice, busy, while_running
from weave.jobs import get
from weave.jobs.runner import run_job
from weave.models import JobAttempt, TaskRow
from weave.tasks.compat import InvalidTaskError, TaskResultStatus, task_backends
from weave.tasks.options import DEFAULTS
from weave.tasks.worker import running_heartbeat

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_hooks():
    while_running.clear()
    yield
    while_running.clear()


class WorkerDied(BaseException):
    """Stands for a worker process that died mid-task (SIGKILL): no finish, no record of its own."""


def pk_of(result):
    return TaskRow.objects.get(result_id=result.id).pk


def expiry(pk):
    return TaskRow.objects.get(pk=pk).lease_expires_at


def dies_mid_task(pk, owner, clock):
    """`owner`'s attempt at task `pk` dies while the task runs: no finish, no record of its own."""

    def die(label):
        raise WorkerDied

    while_running.append(die)
    with pytest.raises(WorkerDied):
        run_job("task", pk, owner=owner, clock=clock)
    while_running.clear()


def test_heartbeat__renews_before_the_start_every_ttl_third_and_right_before_the_finish(clock):
    """`busy` has lease_ttl=6 (renewals every 2 s) and timeout=20; it works 9 s on the fake clock."""
    result = busy.enqueue("parcel")
    pk = pk_of(result)
    seen = {}

    def work(label):
        hb = running_heartbeat()
        seen["before start"] = (list(hb.renewals), expiry(pk))
        for _ in range(9):  # nine seconds of work, the clock checked every second
            clock.advance(1)
            hb.tick()
        seen["heartbeat"] = hb

    while_running.append(work)
    start = clock.current
    assert run_job("task", pk, owner="worker-a", clock=clock) == "done"
    renewals, expires = seen["before start"]
    assert renewals == [0.0]  # renewed before the function started...
    assert expires == start + timedelta(seconds=6)  # ...to the task's own 6 s lease (the claim gave 30 s)
    # ...then at 2, 4, 6 and 8 s (ttl/3), and once more right before the finish at 9 s.
    assert seen["heartbeat"].renewals == [0.0, 2.0, 4.0, 6.0, 8.0, 9.0]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "parcel"


def test_heartbeat__a_task_longer_than_its_ttl_keeps_its_lease_and_no_one_takes_it_over(clock):
    result = busy.enqueue("long")
    pk = pk_of(result)
    rival = []

    def work(label):
        hb = running_heartbeat()
        for _ in range(15):  # 15 s: more than twice the task's 6 s lease
            clock.advance(1)
            hb.tick()
            rival.append(run_job("task", pk, owner="worker-b", clock=clock))

    while_running.append(work)
    assert run_job("task", pk, owner="worker-a", clock=clock) == "done"
    assert set(rival) == {"busy"}  # every try of the other worker found a live lease
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.worker_ids == ["worker-a"]


def test_timeout__renewals_stop_at_the_timeout_and_the_attempt_fails_with_the_reason(clock):
    result = busy.enqueue("stuck")
    pk = pk_of(result)
    seen = {}

    def overrun(label):
        hb = running_heartbeat()
        for _ in range(22):  # 22 s against a 20 s timeout (the lease, renewed at 18 s, lasts until 24 s)
            clock.advance(1)
            hb.tick()
        seen["renewals"] = list(hb.renewals)

    while_running.append(overrun)
    assert run_job("task", pk, owner="worker-a", clock=clock) == "failed"
    assert seen["renewals"][-1] == 18.0  # the last renewal inside the 20 s timeout; none after it
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "weave.tasks.options.TaskTimedOut"
    attempt = JobAttempt.objects.get(job_id=str(pk))
    assert attempt.reason == "TaskTimedOut: ran past its timeout of 20 s (took 22.0 s) (at step run)"


def test_timeout__a_task_that_overruns_its_lease_too_is_failed_by_the_takeover_not_restarted(clock):
    result = busy.enqueue("hung")
    pk = pk_of(result)
    ran = []

    def hang(label):
        ran.append(label)
        hb = running_heartbeat()
        for _ in range(40):  # 40 s: renewed up to the 20 s timeout, then the lease lapses at 24 s
            clock.advance(1)
            hb.tick()

    while_running.append(hang)
    assert run_job("task", pk, owner="worker-a", clock=clock) == "blocked"  # its late finish is refused
    assert run_job("task", pk, owner="worker-b", clock=clock) == "failed"
    assert ran == ["hung"]  # the takeover did not start it again
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.worker_ids == ["worker-a", "worker-b"]
    lost, timed_out = JobAttempt.objects.filter(job_id=str(pk)).order_by("number")
    assert lost.outcome == "blocked" and "our lease expired" in lost.reason  # worker-a's own record
    assert timed_out.reason == "TaskTimedOut: attempt 1 was still running at its timeout of 20 s (at step run)"


def test_stall__a_stopped_worker_loses_the_task_and_its_late_finish_is_refused(clock):
    """The worker stops (no renewal) past its lease; another takes the task over; the first one wakes."""
    result = busy.enqueue("stalled")
    pk = pk_of(result)
    rival = {}

    def stall_then_wake(label):
        while_running.clear()  # the takeover's own run does no more than return
        clock.advance(7)  # stopped: no tick, the 6 s lease lapses
        rival["outcome"] = run_job("task", pk, owner="worker-b", clock=clock)
        rival["guess"] = JobAttempt.objects.get(job_id=str(pk), number=1).reason
        clock.advance(1)

    while_running.append(stall_then_wake)
    woke = clock.current + timedelta(seconds=8)
    assert run_job("task", pk, owner="worker-a", clock=clock) == "blocked"
    assert rival["outcome"] == "done"
    # The takeover guessed that the first worker stopped: its record says it lapsed and who holds the task.
    assert rival["guess"].startswith("Lease lapsed at") and "worker-b at fence 2" in rival["guess"]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.worker_ids == ["worker-a", "worker-b"]
    first, second = JobAttempt.objects.filter(job_id=str(pk)).order_by("number")
    # One record per attempt: the stale worker woke up and put its own account in place of the guess.
    assert (first.number, first.owner, first.outcome) == (1, "worker-a", "blocked")
    assert first.reason.startswith("Lease lost at step run") and "taken over by worker-b" in first.reason
    assert "without a finish" not in first.reason and first.finished_at == woke
    assert (second.number, second.owner, second.outcome) == (2, "worker-b", "done")
    row = TaskRow.objects.get(pk=pk)
    assert row.owner is None and row.fence == 2  # the stale finish changed nothing


def test_takeovers__count_as_attempts_and_max_attempts_bounds_them(clock):
    """`at_most_twice` has max_attempts=2: two workers die running it; the third start is refused."""
    result = at_most_twice.enqueue()
    pk = pk_of(result)
    ran = []

    def die(label):
        ran.append(label)
        raise WorkerDied  # not an error of the task: the process is gone, nothing is recorded

    while_running.append(die)
    ttl = get("task").lease_ttl()
    for crashed in ("crashed-1", "crashed-2"):
        with pytest.raises(WorkerDied):
            run_job("task", pk, owner=crashed, clock=clock)
        clock.advance(ttl + 1)
    assert run_job("task", pk, owner="worker-3", clock=clock) == "failed"
    assert ran == ["at_most_twice"] * 2  # not run a third time
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.worker_ids == ["crashed-1", "crashed-2", "worker-3"] and result.attempts == 3
    lost_1, lost_2, refused = result.errors
    assert lost_1.exception_class_path == lost_2.exception_class_path == "weave.leases.errors.LeaseLost"
    assert refused.exception_class_path == "weave.tasks.options.TooManyAttempts"
    assert "this would be attempt 3 and max_attempts is 2" in JobAttempt.objects.get(job_id=str(pk), number=3).reason


def test_takeover__a_timeout_past_the_q_cluster_timeout_is_named_as_the_likely_stop(clock, settings):
    """django-q2 stops a drain at Q_CLUSTER['timeout']: a task whose own timeout cannot fit in it is
    stopped mid-run on every attempt. The takeover's record says so, instead of only "crashed"."""
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 120}
    result = busy.using(timeout=300).enqueue("long")
    pk = pk_of(result)

    def run_then_get_stopped(label):
        hb = running_heartbeat()
        for _ in range(100):  # renewed for 100 s, then the drain is stopped
            clock.advance(1)
            hb.tick()
        raise WorkerDied

    while_running.append(run_then_get_stopped)
    with pytest.raises(WorkerDied):
        run_job("task", pk, owner="worker-a", clock=clock)
    while_running.clear()
    clock.advance(7)  # the 6 s lease lapses
    assert run_job("task", pk, owner="worker-b", clock=clock) == "done"
    lost = JobAttempt.objects.get(job_id=str(pk), number=1)
    assert lost.outcome == "blocked"
    assert "likely at Q_CLUSTER['timeout'] (120 s)" in lost.reason and "timeout of 300 s" in lost.reason


def test_takeover__a_worker_that_died_early_is_not_blamed_on_the_q_cluster_timeout(clock, settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 120}
    result = busy.using(timeout=300).enqueue("short")
    pk = pk_of(result)
    dies_mid_task(pk, "worker-a", clock)
    clock.advance(7)
    assert run_job("task", pk, owner="worker-b", clock=clock) == "done"
    lost = JobAttempt.objects.get(job_id=str(pk), number=1)
    assert "(the worker stopped, crashed or stalled)" in lost.reason and "Q_CLUSTER" not in lost.reason


# --- options --------------------------------------------------------------------------------------------


def test_options__the_decorators_options_are_stored_with_the_task():
    assert TaskRow.objects.get(pk=pk_of(busy.enqueue("x"))).options == {"lease_ttl": 6.0, "timeout": 20.0}
    assert TaskRow.objects.get(pk=pk_of(add.enqueue(1, 1))).options == {}


def test_options__using_overrides_them_per_enqueue():
    result = busy.using(timeout=90, max_attempts=5, retry_on=[ConnectionError]).enqueue("x")
    stored = TaskRow.objects.get(pk=pk_of(result)).options
    assert stored == {"lease_ttl": 6.0, "timeout": 90.0, "max_attempts": 5, "retry_on": ["builtins.ConnectionError"]}
    assert result.task.timeout == 90


def test_options__backend_options_are_the_defaults_and_the_task_wins(settings):
    from weave.tasks.worker import task_options

    settings.TASKS = {
        "default": {"BACKEND": "weave.tasks.WeaveBackend", "OPTIONS": {"TIMEOUT": 120, "MAX_ATTEMPTS": 7}}
    }
    row = TaskRow.objects.get(pk=pk_of(busy.enqueue("x")))
    options = task_options(row)
    assert (options.timeout, options.max_attempts, options.lease_ttl) == (20.0, 7, 6.0)
    plain = task_options(TaskRow.objects.get(pk=pk_of(add.enqueue(1, 1))))
    assert (plain.timeout, plain.max_attempts, plain.backoff) == (120.0, 7, DEFAULTS["backoff"])


def test_options__wrong_values_are_refused_with_the_reason(settings):
    with pytest.raises(InvalidTaskError, match="timeout must be a number of seconds above 0"):
        add.using(timeout=0)
    with pytest.raises(TypeError, match="unknown option"):
        add.using(retries=3)
    settings.TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend", "OPTIONS": {"RETRIES": 3}}}
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="unknown key"):
        task_backends["default"]


def blocked_task_attempts() -> float:
    """The metrics' count of blocked "task" attempts, as a scrape now reports it."""
    from weave import metrics

    for family in metrics.collect_job_metrics():
        if family.name == "weave_job_attempts":
            return sum(s.value for s in family.samples if s.labels == {"job": "task", "outcome": "blocked"})
    raise AssertionError("no weave_job_attempts series")


def test_takeover__long_after_the_lapse_is_dated_when_recorded_so_the_metrics_count_it():
    """A task's worker died and nobody took the task over for minutes. Its record is dated when the takeover
    writes it, as a job's is (the reason keeps the lapse): dated back to the lapse, it fell before what the
    metrics' running totals had already kept, and the counter never showed it."""
    from weave import metrics
    from weave.leases import FakeClock
    from weave.telemetry import db_now

    metrics._job_attempts.reset()
    clock = FakeClock(start=db_now() - timedelta(minutes=10))
    pk = pk_of(busy.enqueue("lost"))
    dies_mid_task(pk, "worker-a", clock)
    lapsed = expiry(pk)
    before = blocked_task_attempts()  # the kept totals now reach a minute ago, past the lapse
    clock.advance((db_now() - clock.current).total_seconds())
    assert run_job("task", pk, owner="worker-b", clock=clock) == "done"
    lost = JobAttempt.objects.get(job_id=str(pk), number=1)
    assert (lost.owner, lost.outcome, lost.finished_at) == ("worker-a", "blocked", clock.current)
    assert f"Lease lapsed at {lapsed.strftime('%H:%M:%S')}" in lost.reason
    assert blocked_task_attempts() == before + 1

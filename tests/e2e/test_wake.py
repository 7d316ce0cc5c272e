"""Due work runs on time with no new traffic: real qcluster processes on PostgreSQL, the database clock.

Each test creates its work once and then sends nothing more. The minute sweeps are deleted first, so
what gets the work done on time is the due-time watcher (weave.wake), not a sweep that happened to run.
Times are compared on the database clock (`retry_at`, `retry_due_at`, `started_at`, `clock_timestamp()`); the waits
are generous and bounded. No latency is asserted: how soon after its due time a retry went out, and how
soon a killed worker's rows were finished, are reported to the bench (`bench/timings.py`).
"""

import uuid

import pytest
from django_q.conf import Conf

from notifications.models import DeliveryAttempt, Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from onboarding.models import OnboardingRun, RunAttempt
from onboarding.services import onboarding_start
from onboarding.testing.fake_services import FakeConfig, FakeSupplierServices
from tests.e2e.clusters import (
    RECOVERY_MARGIN,
    RETRY_TARGET,
    deliver_through_a_503,
    kill_the_holder,
    no_sweeps,
    start_cluster,
)
from tests.factories import SupplierFactory
from tests.timings import report_timing
from tools.processes import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_503_retry__goes_out_after_its_due_time_with_no_new_traffic(groups, worker_env):
    no_sweeps()
    _, ids, stats = deliver_through_a_503(groups, worker_env, count=5)

    assert stats["unique_deliveries"] == len(ids)
    for pk in ids:
        first, second = DeliveryAttempt.objects.filter(notification_id=pk).order_by("started_at", "pk")
        assert (first.outcome, first.http_status, second.outcome) == ("temporary", 503, "delivered")
        assert "Retry-After" in first.reason or first.retry_at is not None
        # The due time honours Retry-After on the database clock ...
        assert 2.0 <= (first.retry_at - first.finished_at).total_seconds() < 2.5
        # ... and the retry went out no earlier than it (how much later is the bench's figure).
        late = (second.started_at - first.retry_at).total_seconds()
        assert late >= -0.05, f"notification {pk}: retry sent {-late:.3f} s before its due time"
        report_timing("push retry after its due time", late, target=RETRY_TARGET, what="seconds late")


def test_a_sigkilled_workers_rows__are_finished_by_another_worker_with_no_new_traffic(groups, worker_env):
    no_sweeps()
    ttl = 5.0
    killed = kill_the_holder(groups, worker_env, ttl=ttl)
    ids = killed.ids
    finished = DeliveryAttempt.objects.filter(notification_id__in=ids, outcome="delivered")
    assert finished.count() == len(ids) and not finished.filter(owner=killed.owner).exists()
    latest = max(finished.values_list("finished_at", flat=True))
    took = (latest - killed.killed_at).total_seconds()
    report_timing("push rows of a SIGKILLed worker finished after the kill", took, target=ttl + RECOVERY_MARGIN,
                  what=f"seconds (TTL {ttl:g} s)")  # fmt: skip
    # Nobody took the rows over before the dead worker's lease ran out.
    assert min(DeliveryAttempt.objects.filter(notification_id__in=ids).values_list("started_at", flat=True)) >= (
        killed.expires
    )
    assert killed.stats["unique_deliveries"] == len(ids)


def test_an_onboarding_run_released_on_a_503__is_tried_again_after_its_due_time(groups, worker_env):
    no_sweeps()
    with FakeSupplierServices(config=FakeConfig(retry_after=2, fail_first=1)) as services:
        start_cluster(
            groups,
            worker_env,
            WEAVE_SUPPLIER_API_URL=services.url,
            WEAVE_ONBOARDING_STEP_RETRIES="0",  # the first 503 ends the attempt: the run is released
            WEAVE_PUSH_URL="http://127.0.0.1:9/unused",
        )
        run = onboarding_start(supplier=SupplierFactory(device_token=""))

        def completed() -> bool:
            return OnboardingRun.objects.get(pk=run.pk).status == OnboardingRun.Status.COMPLETED

        wait_until(completed, timeout=90, message="the run to complete after its released attempt")

    first, second = RunAttempt.objects.filter(run_id=run.pk).order_by("fence")
    assert first.outcome == RunAttempt.Outcome.RELEASED and "Retry-After" in first.reason
    # Due 2 s (the Retry-After) after the 503 came in: after the attempt started, and at most 2 s after it
    # ended (ended_at is written a moment after the due time was read). Both bounds hold under any load.
    assert (first.retry_due_at - first.started_at).total_seconds() >= 2.0
    assert (first.retry_due_at - first.ended_at).total_seconds() <= 2.0
    late = (second.started_at - first.retry_due_at).total_seconds()
    assert late >= -0.05, f"next attempt {-late:.3f} s before its due time"
    report_timing("onboarding retry after its due time", late, target=RETRY_TARGET, what="seconds late")


def test_drain_coalescing__works_with_the_redis_broker(groups, worker_env, monkeypatch):
    no_sweeps()
    redis_url = "redis://127.0.0.1:6379/0"
    name = f"wake-e2e-{uuid.uuid4().hex[:8]}"
    # This process enqueues through the same Redis queue the cluster reads (django-q2 reads its
    # configuration once, at import).
    for attribute, value in {
        "ORM": None,
        "REDIS": redis_url,
        "PREFIX": name,
        "CLUSTER_NAME": name,
        "BROKER_CLASS": "weave.broker_redis.PooledRedis",
    }.items():
        monkeypatch.setattr(Conf, attribute, value)
    import redis

    queue = redis.from_url(redis_url)
    try:
        with FakePushProvider(latency_ms=10, first_5xx_every=2, retry_after="1", retry_after_on_503=True) as fake:
            ids = [notification_create(device_token=f"device-{i}", title="Hi", body="redis").pk for i in range(20)]
            # Twenty creates, one drain waiting in Redis: the coalescing is Weave's row, not the broker's queue.
            assert queue.llen(f"django_q:{name}:q") == 1
            start_cluster(groups, worker_env, WEAVE_PUSH_URL=fake.push_url, WEAVE_Q_REDIS=redis_url, WEAVE_Q_NAME=name)

            def all_delivered() -> bool:
                return Notification.objects.filter(pk__in=ids, status="delivered").count() == len(ids)

            wait_until(all_delivered, timeout=60, message="delivery through the Redis broker")
            stats = fake.stats()
    finally:
        queue.delete(f"django_q:{name}:q")
    assert stats["unique_deliveries"] == len(ids)
    # The ten retries were woken by the watcher through the same broker, with no sweep and no new traffic.
    assert DeliveryAttempt.objects.filter(notification_id__in=ids, outcome="temporary").count() == 10


@pytest.mark.parametrize("broker", ["orm", "redis"])
def test_a_lost_drain__is_asked_for_again_once_its_hold_lapses_while_the_row_is_due(
    groups, worker_env, monkeypatch, settings, broker
):
    from notifications import queue as notification_queue
    from weave import wake
    from weave.models import WakeRequest

    no_sweeps()
    monkeypatch.setattr(wake, "REQUEST_LAPSE", 4.0)
    env: dict[str, str] = {}
    if broker == "redis":
        name = f"lost-{uuid.uuid4().hex[:8]}"
        env = {"WEAVE_Q_REDIS": "redis://127.0.0.1:6379/3", "WEAVE_Q_NAME": name}
        for attribute, value in {
            "ORM": None,
            "REDIS": env["WEAVE_Q_REDIS"],
            "PREFIX": name,
            "CLUSTER_NAME": name,
            "BROKER_CLASS": "weave.broker_redis.PooledRedis",
        }.items():
            monkeypatch.setattr(Conf, attribute, value)
    with FakePushProvider(latency_ms=10) as fake:
        start_cluster(groups, worker_env, WEAVE_PUSH_URL=fake.push_url, **env)
        # The broker takes the task and loses it (a killed cluster's local queue): the request row is
        # held, nothing runs.
        monkeypatch.setattr("weave.wake.async_task", lambda *args, **kwargs: None)
        created = notification_create(device_token="device-lost", title="Hi", body="lost drain")
        held_until = WakeRequest.objects.get(name=notification_queue.drain_request_name()).queued_until
        monkeypatch.undo()

        def delivered() -> bool:
            return Notification.objects.filter(pk=created.pk, status="delivered").exists()

        wait_until(delivered, timeout=60, message="a watcher to ask for the lost drain again")
    (attempt,) = DeliveryAttempt.objects.filter(notification_id=created.pk)
    # Not before the hold lapsed (the lost request held the slot) ...
    assert attempt.started_at >= held_until
    # ... and a watcher asked again within a couple of seconds of it, not after its 30 s idle LISTEN.
    late = (attempt.started_at - held_until).total_seconds()
    assert late <= RETRY_TARGET + 2.0, f"delivered {late:.2f} s after the lost request's hold lapsed"

"""A worker host whose clock is behind the web host's: libfaketime gives a real qcluster a clock 5 s slow.

With django-q2's stock ORM broker the task's lock is stamped by the enqueuing host and the worker only
takes tasks whose lock is in its own past, so every new notification waits out the skew. With
`weave.broker.DatabaseClockORM` (the documented default) both sides read the database clock and the
skew costs nothing. Times are measured on the database clock (the row's creation here, the attempt
there), and the bound asserted is the skew itself, not a latency target.
"""

import pytest
from django_q.conf import Conf

from notifications.models import DeliveryAttempt, Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from tests.e2e.clusters import db_now, no_sweeps, start_cluster
from tools import skewed_clock
from tools.processes import wait_until

SKEW = 5.0

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.needs(skewed_clock.missing()),
]


@pytest.mark.parametrize("broker", ["weave.broker.DatabaseClockORM", ""], ids=["database-clock", "stock-orm"])
def test_a_worker_5_s_behind__takes_a_new_notification_at_once_with_the_database_clock_broker(
    groups, worker_env, monkeypatch, broker
):
    from weave import wake

    no_sweeps()
    monkeypatch.setattr(Conf, "BROKER_CLASS", broker or None)  # this (web) process enqueues with the same broker
    # A watcher re-asks once a request's slot lapses (from the skewed host, so its task is takeable at
    # once): the requests made here keep their slots 10 s, which keeps that rescue out of the control's
    # first row.
    monkeypatch.setattr(wake, "REQUEST_LAPSE", 10.0)
    with FakePushProvider(latency_ms=10) as fake:
        start_cluster(
            groups,
            worker_env,
            WEAVE_PUSH_URL=fake.push_url,
            WEAVE_Q_BROKER_CLASS=broker,
            # Wall and monotonic time both 5 s slow (libfaketime, with the shim that keeps timed lock
            # waits working under it: without it a drain waiting for answers never wakes up).
            **skewed_clock.skewed_env(-SKEW),
            # Every notification its own broker task: the hand-over is what is measured, not a drain
            # that lingers and picks up the next row itself.
            WEAVE_WAKE_LINGER="0",
        )
        took = []
        for i in range(3):
            created_at = db_now()
            pk = notification_create(device_token=f"device-{i}", title="Hi", body="skewed").pk
            wait_until(
                lambda pk=pk: Notification.objects.filter(pk=pk, status="delivered").exists(),
                timeout=60,
                message=f"the skewed worker to deliver\n{groups.children[-1].log_tail(60) if groups.children else ''}",
            )
            started = DeliveryAttempt.objects.get(notification_id=pk).started_at
            took.append((started - created_at).total_seconds())
    print(f"{broker or 'stock ORM'}: created -> sent {took} s with the worker {SKEW:g} s behind")
    if broker:
        assert max(took) < SKEW / 2, f"the database-clock broker still paid the skew: {took}"
    else:
        # The first new row waits out the skew. Later rows may be served by tasks left over from
        # watchers' asks, so only the first one is the control.
        assert took[0] >= SKEW / 2, f"the control should wait out (most of) the skew: {took}"


N = 300
BEHIND = 300.0  # five minutes
# The provider's latency per send, slow enough that the work outlasts the start of the helper drains
# (at 20 ms one drain sent all 300 before a task reached the other cluster, whatever the clocks).
# A burst needs more: a cluster whose workers are all busy still fetches up to queue_limit + 1 tasks
# (django-q2's pusher fills its local queue), and each one holds the wake-up slot until it lapses
# (weave.wake.REQUEST_LAPSE, 3 s) before the next helper is asked for. The first helper can so reach
# the other cluster about 9 s into the burst: at 100 ms four sends at a time had finished all 300 in
# 7.5 s, and the other cluster did none in some runs. At 400 ms the burst lasts at least 15 s.
PROVIDER_MS = {"in one transaction": 400, "one by one": 100}


# A burst committed at once: the first drain finds a backlog and asks for helpers, so both clusters are
# offered tasks. Rows created one by one, each its own drain request (no lingering drain that would take
# the next row itself, by design, whatever the clocks): every request is a task either cluster may take.
@pytest.mark.parametrize("created", ["in one transaction", "one by one"])
def test_two_clusters_one_5_minutes_behind__each_does_at_least_a_fifth_of_300(groups, worker_env, created):
    from collections import Counter

    from django.db import transaction

    from tools.chaos.faults import owner_pid

    no_sweeps()
    with FakePushProvider(latency_ms=PROVIDER_MS[created]) as fake:
        # Two sends at a time per drain: no single drain can take the whole burst before the helpers it
        # asks for have started on the other cluster.
        env = {"WEAVE_PUSH_URL": fake.push_url, "WEAVE_PUSH_BATCH_SIZE": "10", "WEAVE_PUSH_CONCURRENCY": "2"}
        if created == "one by one":
            env["WEAVE_WAKE_LINGER"] = "0"
        on_time = start_cluster(groups, worker_env, "on-time-qcluster", **env)
        behind = start_cluster(groups, worker_env, "behind-qcluster", **env, **skewed_clock.skewed_env(-BEHIND))
        if created == "in one transaction":
            with transaction.atomic():
                ids = [notification_create(device_token=f"share-{i}", title="Hi", body=str(i)).pk for i in range(N)]
        else:
            # Each row waits for the one before it to be delivered: a drain still sending would take the
            # next row itself, and every row is meant to be a task of its own that either cluster may take.
            ids = []
            for i in range(N):
                ids.append(notification_create(device_token=f"share-{i}", title="Hi", body=str(i)).pk)
                wait_until(
                    lambda pk=ids[-1]: Notification.objects.filter(pk=pk, status="delivered").exists(), timeout=30
                )
        wait_until(
            lambda: Notification.objects.filter(pk__in=ids, status="delivered").count() == N,
            timeout=180,
            message=f"every notification to be delivered\n{behind.log_tail(40)}",
        )
        clusters = {"on time": on_time, "5 min behind": behind}
        pids = {pid: name for name, c in clusters.items() for pid in (c.pgid, *c.descendants())}
        owners = DeliveryAttempt.objects.filter(notification_id__in=ids, outcome="delivered").values_list(
            "owner", flat=True
        )
        by_cluster = Counter(pids.get(owner_pid(o) or -1, "unknown") for o in owners)
        assert fake.stats()["unique_deliveries"] == N
    print(f"deliveries by cluster ({created}): {dict(by_cluster)}")
    for name in clusters:
        assert by_cluster.get(name, 0) >= N // 5, (
            f"the cluster {name} did {by_cluster.get(name, 0)} of {N}: {by_cluster}"
        )

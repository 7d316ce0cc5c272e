"""Three qcluster processes on django-q2's Redis broker against one PostgreSQL: steady traffic, a cluster
killed mid-run, and a caller that cannot reach Redis.

What is asserted is behaviour: every notification delivered, none lost; a constant number of broker
tasks (not one per notification); a caller whose broker is unreachable gets its row stored and no
error, and the watchers deliver it. The latency figures are printed (and written to the JSON file named
by WEAVE_E2E_FIGURES) for the bench and the operations docs, never asserted.
"""

import json
import os
import signal
import statistics
import time
import uuid

import pytest
from django.db.models import Min, Sum
from django_q.conf import Conf
from django_q.models import Schedule

from notifications.models import DeliveryAttempt, Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from tests.e2e.clusters import start_cluster
from tests.e2e.conftest import free_port
from tests.needs import require
from tools.processes import wait_until
from weave.models import WakeRequest

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REDIS_URL = "redis://127.0.0.1:6379/3"
RATE = 5.0  # notifications per second
STEADY = float(os.environ.get("WEAVE_E2E_STEADY_SECONDS", "60"))


def use_redis(monkeypatch, name: str, url: str = REDIS_URL) -> None:
    """Enqueue from this process through the Redis queue the clusters read (django-q2 reads Conf once)."""
    values = {
        "ORM": None,
        "REDIS": url,
        "PREFIX": name,
        "CLUSTER_NAME": name,
        "BROKER_CLASS": "weave.broker_redis.PooledRedis",
    }
    for attribute, value in values.items():
        monkeypatch.setattr(Conf, attribute, value)


def need_redis():
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.ConnectionError:
        require("Redis is not running on 127.0.0.1:6379 (apt-get install redis-server; .ci/run starts it)")
    return client


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_three_clusters_on_redis__steady_traffic_a_killed_cluster_and_an_unreachable_broker(
    groups, worker_env, monkeypatch
):
    client = need_redis()
    Schedule.objects.all().delete()  # the watchers, not a minute sweep, must do the recovery
    name = f"three-{uuid.uuid4().hex[:8]}"
    use_redis(monkeypatch, name)
    env = {
        **worker_env,
        "WEAVE_Q_REDIS": REDIS_URL,
        "WEAVE_Q_NAME": name,
        "WEAVE_PUSH_LEASE_TTL": "5",
        "WEAVE_PUSH_BATCH_SIZE": "20",
    }
    try:
        with FakePushProvider(latency_ms=20) as fake:
            clusters = [
                start_cluster(groups, env, name=f"qcluster-{i}", WEAVE_PUSH_URL=fake.push_url) for i in range(3)
            ]
            steady: list[int] = []
            killed_at = None
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < STEADY:
                steady.append(notification_create(device_token=f"d-{len(steady)}", title="Hi", body="steady").pk)
                if killed_at is None and elapsed > STEADY * 2 / 3:
                    clusters[0].signal(signal.SIGKILL)  # the whole host: its sentinel, workers and local queue
                    killed_at = len(steady)
                time.sleep(max(0.0, started + len(steady) / RATE - time.monotonic()))

            # This process loses Redis; the clusters keep theirs.
            use_redis(monkeypatch, name, url=f"redis://127.0.0.1:{free_port()}/0")
            stranded = [notification_create(device_token=f"o-{i}", title="Hi", body="outage").pk for i in range(5)]
            use_redis(monkeypatch, name)
            ids = steady + stranded

            def all_delivered() -> bool:
                return Notification.objects.filter(pk__in=ids, status="delivered").count() == len(ids)

            wait_until(all_delivered, timeout=120, message="every notification to be delivered")
            stats = fake.stats()
    finally:
        client.delete(f"django_q:{name}:q")

    assert stats["unique_deliveries"] == len(ids)
    tasks = WakeRequest.objects.filter(name__endswith=f"@{name}").aggregate(n=Sum("requests"))["n"] or 0
    # Coalescing holds at a steady rate: a handful of drains, not one per notification.
    assert tasks <= len(ids) / 5, f"{tasks} broker tasks for {len(ids)} notifications"

    latencies = _latencies(steady)
    figures = {
        "notifications": len(ids),
        "rate_per_s": RATE,
        "seconds": STEADY,
        "broker_tasks": tasks,
        "resent_after_kill": stats.get("duplicates"),
        "p50_s": round(statistics.median(latencies), 3),
        "p99_s": round(percentile(latencies, 0.99), 3),
        "max_s": round(max(latencies), 3),
        "over_5_s": sum(1 for latency in latencies if latency > 5),
        "outage_rows_max_s": round(max(_latencies(stranded)), 3),
        "killed_after_row": killed_at,
    }
    print("three clusters on Redis:", json.dumps(figures))
    if os.environ.get("WEAVE_E2E_FIGURES"):
        with open(os.environ["WEAVE_E2E_FIGURES"], "w") as out:
            json.dump(figures, out, indent=2)


def _latencies(ids: list[int]) -> list[float]:
    """Seconds from each row's creation to the start of its delivered attempt (same host, same clock)."""
    created = dict(Notification.objects.filter(pk__in=ids).values_list("pk", "created_at"))
    sent = (
        DeliveryAttempt.objects.filter(notification_id__in=ids, outcome="delivered")
        .values("notification_id")
        .annotate(at=Min("started_at"))
    )
    return [(row["at"] - created[row["notification_id"]]).total_seconds() for row in sent]

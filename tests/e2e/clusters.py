"""What the e2e tests of due work share: a started qcluster, the database clock, and two push scenarios.

Each scenario creates its work once and sends nothing more; the test that runs it asserts what it is
about (how late a retry went out, how soon a killed worker's rows were finished) on what it returns.
"""

import os
import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django_q.models import Schedule

from notifications.models import Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from tools.processes import wait_until

RETRY_TARGET = 1.0  # the bench's target: a retry goes out within 1 s of its due time
RECOVERY_MARGIN = 3.0  # the bench's target: a killed worker's rows are finished within TTL + 3 s


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def no_sweeps() -> None:
    Schedule.objects.all().delete()


def outage_env(worker_env: dict[str, str], url: str, ttl: float) -> dict[str, str]:
    """A worker's environment for the database-outage tests: short leases, and session limits (half the
    lease) so that a worker cut off from the database gives up before its lease could lapse."""
    return {
        **worker_env,
        "DATABASE_URL": url,
        "WEAVE_LEASE_TTL": str(ttl),
        "WEAVE_PUSH_LEASE_TTL": str(ttl),
        "WEAVE_PUSH_CONCURRENCY": "4",
        "WEAVE_PUSH_BATCH_SIZE": "25",
        "WEAVE_WORKER_DB_CONNECT_TIMEOUT": "2",
        "WEAVE_WORKER_DB_STATEMENT_TIMEOUT": str(ttl / 2),
        "WEAVE_WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT": str(ttl / 2),
        "WEAVE_WORKER_DB_TCP_USER_TIMEOUT": str(ttl / 2),
        "WEAVE_LOG_LEVEL": "INFO",
    }


def start_cluster(groups, worker_env, name: str = "qcluster", **env: str):
    cluster = groups.manage(name, "qcluster", env={**worker_env, **env})

    def running() -> bool:
        assert cluster.alive(), cluster.log_tail()
        return "running." in cluster.log_tail(200)

    wait_until(running, timeout=60, message=f"{name} to start")
    return cluster


def wait_delivered(ids: list[int], message: str) -> None:
    def all_delivered() -> bool:
        return Notification.objects.filter(pk__in=ids, status="delivered").count() == len(ids)

    wait_until(all_delivered, timeout=60, message=message)


def deliver_through_a_503(groups, worker_env, count: int) -> tuple[Any, list[int], dict[str, Any]]:
    """Every key's first request gets 503 with Retry-After: 2; its retry is then delivered.

    Returns the cluster, the notification ids and the fake provider's final stats."""
    with FakePushProvider(latency_ms=10, first_5xx_every=1, retry_after="2", retry_after_on_503=True) as fake:
        cluster = start_cluster(groups, worker_env, WEAVE_PUSH_URL=fake.push_url)
        ids = [notification_create(device_token=f"device-{i}", title="Hi", body="retry me").pk for i in range(count)]
        wait_delivered(ids, "every notification to be delivered after its 503")
        return cluster, ids, fake.stats()


@dataclass
class KilledHolder:
    ids: list[int]
    owner: str  # the killed worker's lease owner
    expires: datetime  # its leases' latest expiry, read before the kill
    killed_at: datetime  # database clock
    stats: dict[str, Any]


def kill_the_holder(groups, worker_env, *, ttl: float, count: int = 4) -> KilledHolder:
    """SIGKILL the worker holding `count` rows with their sends in flight; wait for another to finish them."""
    with FakePushProvider(latency_ms=2500) as fake:
        cluster = start_cluster(
            groups, worker_env, WEAVE_PUSH_URL=fake.push_url, WEAVE_PUSH_LEASE_TTL=str(ttl), WEAVE_PUSH_TIMEOUT="4"
        )
        ids = [notification_create(device_token=f"device-{i}", title="Hi", body="kill me").pk for i in range(count)]

        def all_in_flight() -> bool:
            held = Notification.objects.filter(pk__in=ids, owner__isnull=False)
            return held.count() == len(ids) and fake.stats()["in_flight"] >= len(ids)

        wait_until(all_in_flight, timeout=60, message="the rows to be leased and their sends in flight")
        owners = set(Notification.objects.filter(pk__in=ids).values_list("owner", flat=True))
        assert len(owners) == 1, owners  # one drain, one worker process, holds all of them
        (owner,) = owners
        pid = int(owner.split(":")[-2])
        assert pid in cluster.descendants(), "the holder must be a worker process of this cluster"
        expires = max(Notification.objects.filter(pk__in=ids).values_list("lease_expires_at", flat=True))
        os.kill(pid, signal.SIGKILL)
        killed_at = db_now()
        # The slow answers only kept the sends in flight for the kill; the rescue is measured, not the provider.
        fake.configure(latency_ms=10)
        wait_delivered(ids, "another worker to finish the killed worker's rows")
        return KilledHolder(ids=ids, owner=owner, expires=expires, killed_at=killed_at, stats=fake.stats())

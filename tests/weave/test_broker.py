"""weave.broker: task locks on the database clock, one Redis pool per process, staggered recycling,
and the system checks that point a site at them."""

import uuid
from datetime import timedelta

import pytest
import redis
import time_machine
from django.core.checks import run_checks
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.tasks import async_task

from tests.needs import require
from weave import broker
from weave.broker import DatabaseClockORM, stagger_recycle
from weave.broker_redis import PooledRedis, shared_redis
from weave.leases import DbNow

REDIS_URL = "redis://127.0.0.1:6379/5"


@pytest.mark.django_db
@pytest.mark.parametrize("skew", [-3.0, -300.0])
def test_database_clock_orm__a_worker_whose_clock_is_behind_takes_a_new_task_at_once(skew):
    web = DatabaseClockORM(list_key="skew")
    web.enqueue("payload")
    # The worker host's clock is behind the web host's (and the database's).
    with time_machine.travel(timezone.now() + timedelta(seconds=skew), tick=True):
        assert ORM(list_key="skew").dequeue() is None  # the stock broker waits out the skew ...
        taken = DatabaseClockORM(list_key="skew").dequeue()
    assert [payload for _, payload in taken] == ["payload"]  # ... the database clock does not


@pytest.mark.django_db
def test_database_clock_orm__a_taken_task_is_locked_for_retry_seconds_by_the_database_clock(monkeypatch):
    monkeypatch.setattr(Conf, "RETRY", 300)
    key = f"lock-{uuid.uuid4().hex[:8]}"  # a queue of its own: no other test's task is in it
    q = DatabaseClockORM(list_key=key)
    q.enqueue("payload")
    # The lock was stamped with the database's now; a dequeue within the same millisecond would not see
    # it in the past yet. Wait on the database clock itself (never on a sleep of ours).
    for _ in range(1000):
        if OrmQ.objects.filter(key=key, lock__lt=DbNow()).exists():
            break
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=True):  # a worker far ahead
        assert len(q.dequeue()) == 1
        # Locked by the database clock, not the worker's: nobody (ahead or not) takes it again now.
        assert DatabaseClockORM(list_key=key).dequeue() is None
    assert (q.queue_size(), q.lock_size()) == (0, 1)
    lock = OrmQ.objects.get(key=key).lock
    assert 290 < (lock - timezone.now()).total_seconds() <= 300


def _need_redis() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.ConnectionError:
        require("Redis is not running on 127.0.0.1:6379 (apt-get install redis-server; .ci/run starts it)")
    return client


def test_pooled_redis__many_enqueues_share_one_connection(monkeypatch):
    probe = _need_redis()
    name = f"pool-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(Conf, "REDIS", REDIS_URL)
    try:
        for _ in range(30):
            PooledRedis(list_key=name).enqueue("x")
        pool = shared_redis().connection_pool
        assert probe.llen(f"django_q:{name}:q") == 30
        # One socket made for thirty enqueues (the stock broker builds a client, a socket, per enqueue).
        assert len(pool._available_connections) + len(pool._in_use_connections) == 1
    finally:
        probe.delete(f"django_q:{name}:q")


def test_pooled_redis__an_unreachable_redis_fails_an_enqueue_in_bounded_time(monkeypatch):
    from tests.e2e.conftest import free_port

    monkeypatch.setattr(Conf, "REDIS", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(Conf, "BROKER_CLASS", "weave.broker_redis.PooledRedis")
    with pytest.raises(redis.ConnectionError):
        async_task("math.floor", 1.5)


def test_stagger_recycle__gives_each_worker_process_its_own_count_in_range(monkeypatch):
    seen = set()
    for pid in range(1000, 1040):
        monkeypatch.setattr(Conf, "RECYCLE", 500)
        monkeypatch.setattr(broker.os, "getpid", lambda pid=pid: pid)
        stagger_recycle()
        assert 500 <= Conf.RECYCLE <= 750
        seen.add(Conf.RECYCLE)
    assert len(seen) > 20  # spread, not all at one count


def _ids(q_cluster: dict, settings) -> set[str]:
    settings.Q_CLUSTER = q_cluster
    return {m.id for m in run_checks() if m.id and m.id.startswith("weave.W04")}


BASE = {"timeout": 120, "retry": 300, "max_attempts": 3}


def test_checks__the_documented_q_cluster_passes(settings):
    from demo.settings import Q_CLUSTER

    assert _ids(dict(Q_CLUSTER), settings) == set()


def test_checks__warn_about_a_save_limit_the_stock_orm_broker_and_the_stock_redis_broker(settings):
    assert _ids({**BASE, "orm": "default", "save_limit": 1000}, settings) == {"weave.W040", "weave.W041"}
    assert _ids({**BASE, "orm": "default", "broker_class": "weave.broker.DatabaseClockORM"}, settings) == {"weave.W040"}
    assert (
        _ids(
            {
                **BASE,
                "orm": "default",
                "save_limit": -1,
                "broker_class": DatabaseClockORM.__module__ + ".DatabaseClockORM",
            },
            settings,
        )
        == set()
    )
    assert _ids({**BASE, "redis": REDIS_URL, "save_limit": -1}, settings) == {"weave.W042"}
    assert (
        _ids({**BASE, "redis": REDIS_URL, "save_limit": 0, "broker_class": "weave.broker_redis.PooledRedis"}, settings)
        == set()
    )

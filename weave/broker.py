"""django-q2 brokers for Weave sites, named in `Q_CLUSTER['broker_class']`.

- `DatabaseClockORM`: django-q2's ORM broker with every task lock stamped and compared by the
  database's clock. The stock ORM broker stamps a new task's `lock` with the enqueuing host's clock and
  a worker only takes tasks whose lock lies in *its own* past, so a worker host whose clock is 3 s behind
  the web host's waits 3 s for every new task (and one minutes behind starves). Here both sides read
  the same clock, the database's, so host clocks never decide when work starts.
- `PooledRedis`: django-q2's Redis broker with one connection pool per process. The stock broker
  builds a new client (a new TCP connection) for every `async_task`; under steady traffic that is one
  socket per enqueue left in TIME_WAIT. It also bounds connect and read times, so an unreachable Redis
  fails an enqueue in seconds instead of blocking the caller.

`stagger_recycle` (a `post_spawn` receiver) spreads worker recycling: django-q2 recycles a worker after
exactly `recycle` tasks, so workers started together all recycle together.
"""

import logging
import os
import random
import threading
from datetime import timedelta
from typing import Any

import redis
from django_q.brokers.orm import ORM
from django_q.brokers.redis_broker import Redis
from django_q.conf import Conf

from weave.leases import DbNow

logger = logging.getLogger("weave.broker")

# Bounds for the pooled client unless the site's Q_CLUSTER['redis'] dict sets its own.
REDIS_CONNECT_TIMEOUT = 2.0
REDIS_SOCKET_TIMEOUT = 5.0


class DatabaseClockORM(ORM):  # type: ignore[misc]  # django-q2 ships no type hints
    """The ORM broker, with `lock` written and compared as the database's `clock_timestamp()`."""

    def timeout(self, task: Any) -> Any:
        return DbNow(timedelta(seconds=Conf.RETRY))

    def queue_size(self) -> int:
        return int(self.get_connection().filter(key=self.list_key, lock__lte=DbNow()).count())

    def lock_size(self) -> int:
        return int(self.get_connection().filter(key=self.list_key, lock__gt=DbNow()).count())

    def enqueue(self, task: Any) -> Any:
        package = self.get_connection().create(key=self.list_key or Conf.CLUSTER_NAME, payload=task, lock=DbNow())
        return package.pk

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        from time import sleep

        tasks = list(self.get_connection().filter(key=self.list_key, lock__lt=DbNow())[0 : Conf.BULK])
        if not tasks:
            sleep(Conf.POLL)  # an empty queue: spare the CPU, as the stock broker does
            return None
        taken = []
        for task in tasks:
            # Guarded on the lock still being in the database's past: a cluster that took the task
            # first moved it `retry` seconds ahead, so only one taker's UPDATE matches.
            if self.get_connection().filter(id=task.id, lock__lt=DbNow()).update(lock=self.timeout(task)):
                taken.append((task.pk, task.payload))
        return taken


_pools: dict[tuple[int, str], redis.Redis] = {}
_pool_lock = threading.Lock()


def shared_redis() -> redis.Redis:
    """This process's Redis client (one connection pool), built from Q_CLUSTER['redis'] on first use.

    Keyed by process id (a forked worker builds its own instead of sharing its parent's sockets) and
    by the configuration (a test that points django-q2 at another Redis gets a client for it).
    """
    key = (os.getpid(), repr(Conf.REDIS))
    client = _pools.get(key)
    if client is not None:
        return client
    with _pool_lock:
        client = _pools.get(key)
        if client is None:
            bounds = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT, "socket_timeout": REDIS_SOCKET_TIMEOUT}
            if isinstance(Conf.REDIS, str):
                client = redis.Redis.from_url(Conf.REDIS, **bounds)
            else:
                client = redis.Redis(**{**bounds, **(Conf.REDIS or {})})
            _pools.clear()  # a parent's client (inherited over fork) or an old configuration's: unused
            _pools[key] = client
    return client


class PooledRedis(Redis):  # type: ignore[misc]  # django-q2 ships no type hints
    """django-q2's Redis broker on this process's shared client."""

    @staticmethod
    def get_connection(list_key: str | None = None) -> redis.Redis:
        return shared_redis()


def stagger_recycle(**_signal: Any) -> None:
    """Give this worker process its own recycle count, between `recycle` and 1.5 x `recycle`.

    django-q2 compares each worker's task count with `Conf.RECYCLE`; set per process after the fork,
    the workers of one cluster (and of several clusters started together) recycle at different times
    instead of all stopping at once.
    """
    base = int(Conf.RECYCLE or 0)
    if base <= 0:
        return
    Conf.RECYCLE = base + random.Random(os.getpid()).randrange(base // 2 + 1)  # noqa: S311 (spreading, not secrecy)

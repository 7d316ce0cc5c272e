"""django-q2 brokers for Weave sites, named in `Q_CLUSTER['broker_class']`.

- `DatabaseClockORM`: django-q2's ORM broker with every task lock stamped and compared by the
  database's clock. The stock ORM broker stamps a new task's `lock` with the enqueuing host's clock and
  a worker only takes tasks whose lock lies in *its own* past, so a worker host whose clock is 3 s behind
  the web host's waits 3 s for every new task (and one minutes behind starves). Here both sides read
  the same clock, the database's, so host clocks never decide when work starts. Between polls of an
  empty queue it waits on `weave.wake.TaskRequestWait`, so on PostgreSQL a coalesced request's task is
  taken as soon as it is enqueued, not at the next poll.
- `weave.broker_redis.PooledRedis` (its own module: `redis` is an optional dependency): django-q2's
  Redis broker with one connection pool per process. The stock broker
  builds a new client (a new TCP connection) for every `async_task`; under steady traffic that is one
  socket per enqueue left in TIME_WAIT. It also bounds connect and read times, so an unreachable Redis
  fails an enqueue in seconds instead of blocking the caller.

`stagger_recycle` (a `post_spawn` receiver) spreads worker recycling: django-q2 recycles a worker after
exactly `recycle` tasks, so workers started together all recycle together.
"""

import logging
import os
import random
from datetime import timedelta
from typing import Any

from django_q.brokers.orm import ORM
from django_q.conf import Conf

from weave.leases import DbNow
from weave.reconnect import ReconnectOnDequeue
from weave.wake import TaskRequestWait

logger = logging.getLogger("weave.broker")


class DatabaseClockLocks(ORM):  # type: ignore[misc]  # django-q2 ships no type hints
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

    _request_wait: TaskRequestWait | None = None

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        tasks = list(self.get_connection().filter(key=self.list_key, lock__lt=DbNow())[0 : Conf.BULK])
        if not tasks:
            # An empty queue: spare the CPU as the stock broker does, but wake for a request at once (a
            # new row's drain must not wait out the poll). Opened here, in the process that dequeues.
            if self._request_wait is None:
                self._request_wait = TaskRequestWait()
            self._request_wait.wait(Conf.POLL)
            return None
        taken = []
        for task in tasks:
            # Guarded on the lock still being in the database's past: a cluster that took the task
            # first moved it `retry` seconds ahead, so only one taker's UPDATE matches.
            if self.get_connection().filter(id=task.id, lock__lt=DbNow()).update(lock=self.timeout(task)):
                taken.append((task.pk, task.payload))
        return taken


class DatabaseClockORM(ReconnectOnDequeue, DatabaseClockLocks):
    """The database-clock broker that rides out a PostgreSQL restart or failover (the documented default).

    `ReconnectOnDequeue` must come first in the MRO, above the class that defines `dequeue`: a dequeue
    defined in this class itself would override the mixin's, and a cut-off dequeue would stop the
    cluster's pusher for 10 seconds again.
    """


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

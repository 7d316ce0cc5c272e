"""`DatabaseClockORM`: django-q2's ORM broker with task locks judged by the database clock (with host
clocks a skewed worker host waits out the skew on every task), riding out a database restart, and
woken by a task request while its queue is empty. The Redis broker is `weave.broker_redis`."""

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
        if not tasks:  # sleep as the stock broker does, but wake for a task request at once
            if self._request_wait is None:
                self._request_wait = TaskRequestWait()
            self._request_wait.wait(Conf.POLL)
            return None
        taken = []
        for task in tasks:
            # Guarded on the lock still being past: only one taker's UPDATE matches.
            if self.get_connection().filter(id=task.id, lock__lt=DbNow()).update(lock=self.timeout(task)):
                taken.append((task.pk, task.payload))
        return taken


class DatabaseClockORM(ReconnectOnDequeue, DatabaseClockLocks):
    """The documented default: the mixin first, above the class that defines `dequeue`."""


def stagger_recycle(**_signal: Any) -> None:
    """Give this worker its own recycle count in [recycle, 1.5 x recycle] (`post_spawn`): workers started
    together do not all recycle at once."""
    base = int(Conf.RECYCLE or 0)
    if base <= 0:
        return
    Conf.RECYCLE = base + random.Random(os.getpid()).randrange(base // 2 + 1)  # noqa: S311 (spreading, not secrecy)

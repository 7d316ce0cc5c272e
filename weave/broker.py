"""django-q2's ORM broker for Weave. `DatabaseClockORM`: task locks judged by the database clock (with host
clocks a skewed worker host waits out the skew on every task), riding out a database restart
(`ReconnectOnDequeue`), and woken by a task request while its queue is empty. The Redis broker is
`weave.broker_redis`."""

import logging
import os
import random
import time
from datetime import timedelta
from typing import Any

from django.db import connections
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from weave.leases import DbNow
from weave.wake import TASK_CHANNEL, Listener, close_quietly
from weave.worker_db import is_cut_off

logger = logging.getLogger("weave.broker")

FIRST_PAUSE = 0.25
MAX_PAUSE = 2.0
ACK_PATIENCE = 60.0  # seconds an acknowledgement waits for the database before it is given up


class ReconnectOnDequeue:
    """A broker mixin that keeps a cluster taking tasks through a database restart, where django-q2's pusher
    would treat a failed dequeue as a crash and restart 10 s later. A cut-off dequeue is "no task" after a
    pause (0.25 s doubling to 2 s); a cut-off acknowledgement is retried for ACK_PATIENCE s, then given up
    (the task runs again)."""

    _pause = 0.0
    _outage_since: float | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Its own dequeue or acknowledge would shadow the mixin's and look protected: refuse it.
        super().__init_subclass__(**kwargs)
        for name in ("dequeue", "acknowledge"):
            if name in cls.__dict__:
                raise TypeError(
                    f"{cls.__qualname__} defines {name}() beside ReconnectOnDequeue, whose {name}() would never "
                    "run: define it on a base class and list the mixin before that class"
                )

    def dequeue(self) -> Any:
        try:
            tasks = super().dequeue()  # type: ignore[misc]
        except Exception as error:
            if not is_cut_off(error):
                raise
            if self._outage_since is None:  # once per outage, not once per try
                self._outage_since = time.monotonic()
                logger.warning("event=broker_cut_off reason=%r; retrying with backoff", str(error)[:200])
            self._pause = _back_off(self._pause)
            return None
        if self._outage_since is not None:
            logger.warning("event=broker_reconnected down_s=%.1f", time.monotonic() - self._outage_since)
            self._outage_since = None
        self._pause = 0.0
        return tasks

    def acknowledge(self, task_id: Any) -> Any:
        deadline, pause = time.monotonic() + ACK_PATIENCE, 0.0
        while True:
            try:
                return super().acknowledge(task_id)  # type: ignore[misc]
            except Exception as error:
                if not is_cut_off(error):
                    raise
                if time.monotonic() >= deadline:
                    message = "event=broker_ack_lost task=%s reason=%r: the task runs again once its lock lapses"
                    logger.warning(message, task_id, str(error)[:200])
                    return None
                pause = _back_off(pause)


def _back_off(pause: float) -> float:
    """Drop the broker's broken connection (the next try reopens it), then sleep the next pause; return it."""
    close_quietly(connections[Conf.ORM or "default"])
    pause = min(max(pause * 2, FIRST_PAUSE), MAX_PAUSE)
    time.sleep(pause)
    return pause


class ReconnectingORM(ReconnectOnDequeue, ORM):  # type: ignore[misc]  # django-q2 ships no type hints
    """django-q2's stock ORM broker, riding out a database restart instead of stopping its pusher."""


class DatabaseClockLocks(ORM):  # type: ignore[misc]
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

    _request_wait: Listener | None = None

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        tasks = list(self.get_connection().filter(key=self.list_key, lock__lt=DbNow())[0 : Conf.BULK])
        if not tasks:  # sleep as the stock broker does, but wake for a task request at once
            if self._request_wait is None:
                self._request_wait = Listener(TASK_CHANNEL)
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

"""Keep a django-q2 cluster taking tasks through a PostgreSQL restart or failover.

django-q2's pusher process treats any error from `broker.dequeue()` as a crashed broker: it logs it,
sleeps 10 seconds and exits, and its sentinel starts a new pusher. With the ORM broker the broker is
PostgreSQL itself, so every restart of the server (or a failover to another address) costs every
cluster at least 10 seconds without new tasks, on top of the outage.

`ReconnectOnDequeue` turns a dequeue that failed because the link to the database is gone into "no
task this time": the broken connection is closed, the pusher waits a short, growing pause (0.25 s
doubling up to 2 s) and asks again, so it takes tasks again a
moment after the server answers. Any other error is raised as before. Mix it into the broker class
in `Q_CLUSTER["broker_class"]` (`ReconnectingORM` is the stock ORM broker with it).

The monitor process acknowledges each finished task through the same broker. An acknowledgement
that fails kills the monitor (django-q2 catches a failed result save, not a failed ack): the sentinel
starts another, but the results it was handling are lost and the task, never deleted from the queue,
runs again once its lock lapses. So a cut-off acknowledgement is tried again with the same backoff for
up to ACK_PATIENCE seconds; only then is it given up, with a warning (the task runs again later).
"""

import logging
import time
from typing import Any

from django.db import connections
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from weave.worker_db import is_cut_off

logger = logging.getLogger("weave.reconnect")

FIRST_PAUSE = 0.25
MAX_PAUSE = 2.0
ACK_PATIENCE = 60.0  # seconds an acknowledgement waits for the database before it is given up


class ReconnectOnDequeue:
    """A broker mixin: a dequeue cut off from the database returns no task after a short backoff."""

    _pause = 0.0
    _outage_since: float | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A class that lists the mixin and defines its own dequeue or acknowledge shadows the mixin's: it
        # would look protected and stall the pusher (or kill the monitor) at every restart. Refuse it.
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
            self._wait_for_database(error)
            return None
        if self._outage_since is not None:
            logger.warning("event=broker_reconnected down_s=%.1f", time.monotonic() - self._outage_since)
            self._outage_since = None
        self._pause = 0.0
        return tasks

    def acknowledge(self, task_id: Any) -> Any:
        deadline = time.monotonic() + ACK_PATIENCE
        pause = 0.0
        while True:
            try:
                return super().acknowledge(task_id)  # type: ignore[misc]
            except Exception as error:
                if not is_cut_off(error):
                    raise
                if time.monotonic() >= deadline:
                    logger.warning(
                        "event=broker_ack_lost task=%s reason=%r: the task runs again once its lock lapses",
                        task_id,
                        str(error)[:200],
                    )
                    return None
                _close_broker_connection()
                pause = min(max(pause * 2, FIRST_PAUSE), MAX_PAUSE)
                time.sleep(pause)

    def _wait_for_database(self, error: BaseException) -> None:
        if self._outage_since is None:  # once per outage, not once per try
            self._outage_since = time.monotonic()
            logger.warning("event=broker_cut_off reason=%r; retrying with backoff", str(error)[:200])
        _close_broker_connection()
        self._pause = min(max(self._pause * 2, FIRST_PAUSE), MAX_PAUSE)
        time.sleep(self._pause)


def _close_broker_connection() -> None:
    try:
        connections[Conf.ORM or "default"].close()  # reopened by the next try
    except Exception:  # closing a broken connection may fail too; it is dropped either way
        logger.debug("closing the broker's connection failed", exc_info=True)


class ReconnectingORM(ReconnectOnDequeue, ORM):  # type: ignore[misc]  # django-q2 is untyped
    """django-q2's ORM broker that rides out a database restart instead of stopping its pusher."""

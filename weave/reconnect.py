"""Keep a django-q2 cluster taking tasks through a database restart: its pusher treats a failed dequeue as
a crash and restarts 10 s later. A cut-off dequeue here is "no task" after a pause (0.25 s doubling to
2 s); a cut-off acknowledgement is retried for ACK_PATIENCE s, then given up (the task runs again)."""

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

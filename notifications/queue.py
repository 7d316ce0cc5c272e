"""Enqueue the drain task. A leaf: it knows the broker API and the task's dotted name, nothing else.

The worker (`delivery`) and the services both ask for a drain through here, so neither imports the
task module that imports the worker.
"""

from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.tasks import async_task

DRAIN_TASK = "notifications.drain"


def enqueue_drain() -> None:
    """Ask the workers to drain due notifications, unless a drain is already waiting in the queue.

    One drain delivers every due row it can within its budget, so a second queued drain would only
    find the work done. Coalescing keeps a burst of `notification_create` calls from queueing one
    task per notification. Only the ORM broker's queue can be inspected; other brokers always enqueue.
    """
    if _drain_waiting():
        return
    async_task("notifications.tasks.drain", task_name=DRAIN_TASK, group="notifications")


def _drain_waiting() -> bool:
    if not Conf.ORM:
        return False
    # Queued (not yet picked) tasks carry their enqueue time as `lock`; a picked one is locked into the
    # future. This is django-q2's own bookkeeping, on its own clock, not a lease decision.
    waiting = OrmQ.objects.using(Conf.ORM).filter(key=Conf.CLUSTER_NAME, lock__lte=timezone.now())
    return any(package.name() == DRAIN_TASK for package in waiting.order_by("pk")[:20])

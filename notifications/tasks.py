"""Thin django-q2 entry points for the notifications app."""

from django_q.tasks import async_task


def enqueue_drain() -> None:
    """Ask the workers to drain due notifications."""
    async_task("notifications.tasks.drain", task_name="notifications.drain", group="notifications")


def drain() -> None:
    """Deliver due notifications (filled in by the delivery worker)."""
    # Placeholder until notifications.delivery lands.
    return None

"""Bench-only: the "group finish" prototype, now the app's own path.

This module used to hold a raw `UPDATE ... FROM (VALUES ...)` variant of the worker's finish, measured
beside the ORM `CASE` statement it replaced (+20 %). The app now finishes every group that way in the
lease core (`LeaseQuerySet.release_each`), so the variant is the app: `drain` below runs the app's
drain, and the scenario that measures it reports the app's path under the old label.
"""

from typing import Any


def drain() -> dict[str, Any]:
    """The django-q2 entry point of the (former) group-finish variant: the app's own drain."""
    from notifications.delivery import drain as run_drain

    return run_drain(enqueue_more=False).as_dict()

"""The wishes behind FCM topic jobs: record a wish per registration and topic, and ask for the job that applies it.

Kept apart from `notifications.topics` (the services and the job) so that a device's deactivation
(`notifications.devices`) can wish it out of its topics without importing the job.
"""

from collections.abc import Iterator
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import F

from notifications.backends.iid import MAX_TOKENS
from notifications.models import TopicIntent, TopicSubscription
from weave.jobs import enqueue_job
from weave.leases import Clock, default_clock

JOB_TYPE = "fcm_topic"
# Registrations per job on the v1 API (one call each): a job's calls fit well inside its time budget.
MAX_PER_V1_JOB = 100
_CHUNK = 500  # registrations per IN (...) list: inside every database's parameter limit


def record_wishes(
    alias: str, topic: str, registrations: list[str], *, subscribed: bool, clock: Clock = default_clock
) -> list[TopicSubscription]:
    """Record the wish for each registration (a new version each) and create the jobs that apply it.

    Runs in the caller's transaction: the wishes and the jobs commit together, and each job is asked
    for once they did."""
    size = MAX_TOKENS if topic_api(alias) == "iid" else MAX_PER_V1_JOB
    action = TopicSubscription.Action.SUBSCRIBE if subscribed else TopicSubscription.Action.UNSUBSCRIBE
    jobs = [
        TopicSubscription(backend=alias, topic=topic, action=action, tokens=registrations[start : start + size])
        for start in range(0, len(registrations), size)
    ]
    with transaction.atomic():  # the row locks need one; inside the caller's, a savepoint
        _bump(alias, topic, registrations, subscribed=subscribed, clock=clock)
        TopicSubscription.objects.bulk_create(jobs)
        for job in jobs:
            transaction.on_commit(partial(enqueue_job, JOB_TYPE, job.pk))
    return jobs


def _bump(alias: str, topic: str, registrations: list[str], *, subscribed: bool, clock: Clock) -> None:
    """Set the wish of each registration and give it a new version."""
    # In one order whoever calls: two calls wishing for the same registrations at once take their row
    # locks alike (the insert's and the update's), so one waits for the other instead of deadlocking.
    for chunk in chunks(sorted(registrations)):
        fresh = [
            TopicIntent(backend=alias, registration=r, topic=topic, subscribed=subscribed, version=0) for r in chunk
        ]
        TopicIntent.objects.bulk_create(fresh, ignore_conflicts=True)
        rows = TopicIntent.objects.filter(backend=alias, topic=topic, registration__in=chunk)
        locked = list(rows.order_by("registration").select_for_update().values_list("pk", flat=True))
        # Every wish is a new version, even the same wish again: a job that sent an older one sends again.
        TopicIntent.objects.filter(pk__in=locked).update(
            subscribed=subscribed, version=F("version") + 1, updated_at=clock.now()
        )


def unsubscribe_registration(*, backend: str, registration: str, clock: Clock = default_clock) -> list[Any]:
    """Wish `registration` out of every topic it is wished into, with a job per topic; return the jobs' keys.

    For a device leaving (deactivated or unregistered). Nothing happens, and nothing is read again,
    when it has no topic."""
    topics = list(
        TopicIntent.objects.filter(backend=backend, registration=registration, subscribed=True).values_list(
            "topic", flat=True
        )
    )
    return [
        job.pk
        for topic in topics
        for job in record_wishes(backend, topic, [registration], subscribed=False, clock=clock)
    ]


def chunks(items: list[str]) -> Iterator[list[str]]:
    """`items` in slices short enough for one IN (...) list."""
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def topic_api(alias: str) -> str:
    """The topic API FCM backend `alias` uses: "v1" or "iid"."""
    from notifications.backends import backend_configs
    from notifications.backends.fcm_topics import topic_api_name

    return topic_api_name((backend_configs().get(alias) or {}).get("OPTIONS") or {})

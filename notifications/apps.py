import logging
from typing import Any

from django.apps import AppConfig

from weave.conf import Key, SettingsGroup, WeaveSettings, count, flag, lease_ttl, mapping_or_none, seconds, text


class PushSettings(SettingsGroup):
    """The push app's `WEAVE` keys (defining the class declares them; `weave_settings.PUSH_...` reads them)."""

    PUSH_BACKENDS = mapping_or_none(
        'alias -> {"BACKEND": dotted path, "OPTIONS": {...}}, like STORAGES; None: one "default" webhook '
        "built from PUSH_URL / PUSH_TOKEN (notifications.backends.registry)"
    )
    PUSH_URL = text("", "the default webhook's endpoint; each message is a JSON POST", url=True)
    PUSH_TOKEN = text("", "sent as Authorization: Bearer ...", secret=True)
    PUSH_TIMEOUT = seconds(10.0, "per request: connect, send, headers and the whole body together")
    PUSH_BATCH_SIZE = count(100, "rows claimed under one lease")
    PUSH_CONCURRENCY = count(20, "requests in flight per worker on each HTTP/1.1 backend (the webhook)")
    PUSH_HTTP2_CONCURRENCY = count(
        300, "requests in flight per worker on each HTTP/2 backend (FCM, APNs, Web Push): streams, not connections"
    )
    PUSH_BUDGET = seconds(60.0, "seconds a drain may start new rows; must stay below Q_CLUSTER timeout")
    PUSH_LEASE_TTL = lease_ttl("lease TTL of a batch of notifications", fallback=WeaveSettings.LEASE_TTL)
    PUSH_MAX_ATTEMPTS = count(5, "attempts before a notification is failed")
    PUSH_BACKOFF_BASE = seconds(2.0, "first retry delay; doubled per attempt, with jitter", minimum=0.0)
    PUSH_BACKOFF_MAX = seconds(3600.0, "cap on the retry delay", minimum=0.0)
    PUSH_MAX_PAYLOAD_BYTES = count(4096, "largest JSON payload a notification may carry")
    # Deprecated: before breakers were judged on a ratio this was "failures in a row"; it is now read
    # as PUSH_BREAKER_MIN_ANSWERS when that key is not set.
    PUSH_BREAKER_THRESHOLD = count(200, "deprecated: read as PUSH_BREAKER_MIN_ANSWERS when that is unset")
    PUSH_BREAKER_WINDOW = count(400, "answers per breaker scope the failure ratio is taken over")
    PUSH_BREAKER_MIN_ANSWERS = Key(
        200,
        "answers a breaker scope's window must hold before its failure ratio can open it",
        kind=int,
        minimum=1,
        fallback=PUSH_BREAKER_THRESHOLD,
    )
    PUSH_BREAKER_RUN = count(
        20,
        "failures in a row (in start order) that open a breaker scope before its volume is reached; 0: never",
        minimum=0,
    )
    PUSH_BREAKER_RATIO = Key(0.5, "share of failures in the window that opens a breaker scope", kind=float, above=0.0)
    PUSH_BREAKER_COOLDOWN = seconds(30.0, "how long rows held back by an open breaker wait", minimum=0.0)
    PUSH_ORIGIN_HOLD_MAX = seconds(300.0, "longest pause a user-chosen origin (a Web Push endpoint) may ask for")
    # --- devices: what end users may register (docs/devices.md) ---
    PUSH_MAX_DEVICES_PER_USER = count(100, "active devices one user may have; registration beyond it is refused")
    PUSH_WEBPUSH_HOSTS: Key[tuple[str, ...]] = Key(
        (
            "fcm.googleapis.com",
            "updates.push.services.mozilla.com",
            "push.services.mozilla.com",
            "*.push.apple.com",
            "*.notify.windows.com",
        ),
        "Web Push endpoint hosts allowed (exact names, or *.suffix for its subdomains); default: known push services",
        kind=tuple,
    )
    PUSH_WEBPUSH_EXTRA_HOSTS: Key[tuple[str, ...]] = Key(
        (), "more Web Push endpoint hosts, added to PUSH_WEBPUSH_HOSTS", kind=tuple
    )
    PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK = flag(
        False, "UNSAFE, local fakes only: also accept Web Push endpoints on 127.0.0.0/8, ::1 and localhost"
    )
    PUSH_API_RATE = count(30, "device API requests one user may make per minute (notifications.urls)")
    PUSH_API_AUTHENTICATE = text(
        "", "dotted path of a callable(request) -> user or None for the device API (token auth); empty: sessions"
    )
    PUSH_API_PERMISSION = text("", "dotted path of a callable(request, user) -> bool; empty: any active user")
    PUSH_QUIET_HOURS = text(
        "",
        "dotted path of a callable(user, at, priority) -> datetime or None: when a push due at `at` may go; "
        "asked at creation and again when a worker claims the row",
    )


class NotificationsConfig(AppConfig):
    name = "notifications"
    label = "weave_notifications"  # a host site may already have an app labelled "notifications"
    verbose_name = "Push notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        from notifications import (
            checks,  # noqa: F401  (registers the system checks)
            console,
            retention,
            topics,
        )
        from notifications.explain import explain_notification
        from notifications.models import Notification, TopicSubscription
        from notifications.queue import DRAIN, JOB, JOB_KEY, enqueue_drain
        from weave.jobs import JobType, Step, register
        from weave.schedules import ScheduleSpec

        # Each worker process imports the drain's modules as it starts, not while a first drain's rows wait.
        post_spawn.connect(_warm_up_drains, dispatch_uid="notifications.tasks.warm_up")
        register(
            JobType(
                name=JOB,
                key=JOB_KEY,
                model=Notification,
                settings=PushSettings,
                ttl_setting="PUSH_LEASE_TTL",
                # The sweep: picks up expired leases and due retries even when nothing new is created.
                schedule=ScheduleSpec(name="notifications.sweep", func="notifications.tasks.sweep", minutes=1),
                # Retries and lapsed leases: the watcher asks for a drain when the earliest comes due.
                next_due=Notification.objects.next_due_at,
                wake=enqueue_drain,
                explainer=explain_notification,
                panel_title="Push notifications",
                panel_order=10,
                panel=console.render_panel,
                latency=console.recent_latencies,
                latency_group="backend",
                timeout_setting="PUSH_TIMEOUT",
                metrics=console.collect_metrics,
                # The engine drains it; the pipeline (claim buffer, concurrent sender, completer) is its own.
                pipeline=_deliver_due,
                due_rows=Notification.objects.claimable,
                batch_setting="PUSH_BATCH_SIZE",
                request=DRAIN,
            )
        )
        # FCM topic subscriptions: fenced jobs of the core's runner, one per Instance ID batch.
        register(
            JobType(
                name=topics.JOB_TYPE,
                model=TopicSubscription,
                ttl_setting="PUSH_LEASE_TTL",
                steps=(Step("call", topics.call, save=topics.settle),),
                budget=120.0,
                retry=topics.RETRY,
                explainer=topics.explain_topic_subscription,
            )
        )
        # What the retention purge may delete of this app's history (weave.retention).
        retention.register()


def _deliver_due(task: Any) -> Any:
    from notifications.tasks import deliver_due  # imported by the worker that drains, not by every process

    return deliver_due(task)


def _warm_up_drains(**signal: Any) -> None:
    try:
        from notifications.tasks import warm_up  # the import is most of the warm-up

        warm_up(**signal)
    except Exception:  # noqa: BLE001 - only a head start: the first drain imports (and reports) it anyway
        logging.getLogger("weave.notifications").debug("drain warm-up failed", exc_info=True)

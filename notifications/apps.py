from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    label = "weave_notifications"  # a host site may already have an app labelled "notifications"
    verbose_name = "Push notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notifications import checks  # noqa: F401  (registers the system checks)
        from notifications.explain import explain_notification
        from weave.explain import register_explainer
        from weave.schedules import ScheduleSpec, register_schedule

        # The sweep: picks up expired leases and due retries even when nothing new is created.
        register_schedule(ScheduleSpec(name="notifications.sweep", func="notifications.tasks.sweep", minutes=1))
        from notifications import retention

        # What the retention purge may delete of this app's history (weave.retention).
        retention.register()
        register_explainer("notification", explain_notification)

        # The operator console: lease counts, the dashboard panel, latency for the TTL advice, metrics.
        from notifications import console
        from notifications.models import Notification
        from weave.telemetry import (
            LatencySource,
            Panel,
            register_latency_source,
            register_lease_job,
            register_metrics,
            register_panel,
        )

        register_lease_job("notification", Notification)
        register_panel(Panel(key="notifications", title="Push notifications", order=10, render=console.render_panel))
        register_latency_source(
            LatencySource(
                job="notification",
                group="backend",
                ttl_setting="PUSH_LEASE_TTL",
                timeout_setting="PUSH_TIMEOUT",
                fetch=console.recent_latencies,
            )
        )
        register_metrics("notifications", console.collect_metrics)
        from notifications.queue import enqueue_drain
        from weave.wake import WatchSpec, register_watch

        # Retries and lapsed leases: the watcher asks for a drain when the earliest comes due.
        register_watch(WatchSpec(name="notifications", next_due=Notification.objects.next_due_at, wake=enqueue_drain))

from django.apps import AppConfig


class OnboardingConfig(AppConfig):
    name = "onboarding"
    label = "weave_onboarding"
    verbose_name = "Supplier onboarding"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from onboarding import checks  # noqa: F401  (registers the system checks)
        from onboarding.explain import explain_run
        from weave.explain import register_explainer
        from weave.schedules import ScheduleSpec, register_schedule

        # The sweep: re-enqueues pending runs and runs whose worker died (expired lease).
        register_schedule(ScheduleSpec(name="onboarding.sweep", func="onboarding.tasks.sweep", minutes=1))
        from onboarding import retention

        # What the retention purge may delete of this app's history (weave.retention).
        retention.register()
        register_explainer("run", explain_run)

        # The operator console: lease counts, the dashboard panel, step durations for the TTL advice, metrics.
        from onboarding import console
        from onboarding.models import OnboardingRun
        from weave.telemetry import (
            LatencySource,
            Panel,
            register_latency_source,
            register_lease_job,
            register_metrics,
            register_panel,
        )

        register_lease_job("onboarding", OnboardingRun)
        register_panel(Panel(key="onboarding", title="Supplier onboarding", order=20, render=console.render_panel))
        register_latency_source(
            LatencySource(
                job="onboarding",
                group="step",
                ttl_setting="ONBOARDING_LEASE_TTL",
                fetch=console.recent_step_durations,
            )
        )
        register_metrics("onboarding", console.collect_metrics)
        from onboarding.services import onboarding_wake
        from weave.wake import WatchSpec, register_watch

        # Released runs' due times and lapsed leases: the watcher asks for attempts when they come due.
        register_watch(WatchSpec(name="onboarding", next_due=OnboardingRun.objects.next_due_at, wake=onboarding_wake))

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
        register_explainer("run", explain_run)

        from onboarding.models import OnboardingRun
        from onboarding.services import onboarding_wake
        from weave.wake import WatchSpec, register_watch

        # Released runs' due times and lapsed leases: the watcher asks for attempts when they come due.
        register_watch(WatchSpec(name="onboarding", next_due=OnboardingRun.objects.next_due_at, wake=onboarding_wake))

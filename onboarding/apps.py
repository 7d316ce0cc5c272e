from django.apps import AppConfig

from weave.conf import SettingsGroup, WeaveSettings, count, dotted_paths, lease_ttl, seconds, text


class OnboardingSettings(SettingsGroup):
    """Onboarding's `WEAVE` keys (defining the class declares them; `weave_settings.ONBOARDING_...` reads them)."""

    SUPPLIER_API_URL = text("", "base URL of the supplier services", url=True)
    SUPPLIER_API_TIMEOUT = seconds(10.0, "per request")
    ONBOARDING_LEASE_TTL = lease_ttl("lease TTL of an onboarding run", fallback=WeaveSettings.LEASE_TTL)
    ONBOARDING_BUDGET = seconds(90.0, "seconds one attempt may work; below Q_CLUSTER timeout")
    ONBOARDING_STEP_RETRIES = count(3, "temporary failures retried within a step", minimum=0)
    ONBOARDING_RETRY_BACKOFF = seconds(0.5, "seconds before the first retry in a step, doubled per retry", minimum=0.0)
    ONBOARDING_RETRY_AFTER_MAX = seconds(30.0, "a longer Retry-After is capped to this", minimum=0.0)
    ONBOARDING_RELEASE_BACKOFF = seconds(
        2.0, "a run released on a temporary failure is due again after this, doubled per release, with jitter"
    )
    ONBOARDING_RELEASE_BACKOFF_MAX = seconds(300.0, "cap on the release backoff")
    # A run records the list when it starts, so changing it never reshapes runs in flight; the
    # system check onboarding.E003 loads it.
    ONBOARDING_STEPS = dotted_paths(
        (
            "onboarding.steps.builtin.verify_tax_id",
            "onboarding.steps.builtin.screen_sanctions",
            "onboarding.steps.builtin.create_vendor_record",
            "onboarding.steps.builtin.set_payment_terms",
            "onboarding.steps.builtin.register_bank_account",
            "onboarding.steps.builtin.send_welcome_notification",
        ),
        "the onboarding plan: dotted paths of the steps a new run takes, in order",
    )


class OnboardingConfig(AppConfig):
    name = "onboarding"
    label = "weave_onboarding"
    verbose_name = "Supplier onboarding"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from onboarding import (
            checks,  # noqa: F401  (registers the system checks)
            console,
            retention,
        )
        from onboarding.explain import explain_run
        from onboarding.models import OnboardingRun
        from onboarding.runner import run_onboarding
        from onboarding.services import runs_needing_a_worker
        from weave.jobs import JobType, register
        from weave.schedules import ScheduleSpec

        register(
            JobType(
                name="onboarding",
                model=OnboardingRun,
                settings=OnboardingSettings,
                ttl_setting="ONBOARDING_LEASE_TTL",
                # The sweep: re-enqueues pending runs and runs whose worker died (expired lease).
                schedule=ScheduleSpec(name="onboarding.sweep", func="onboarding.tasks.sweep", minutes=1),
                # The engine drains the runs, one attempt per task, and its watcher asks for a drain when a
                # released run comes due or a lease lapses (`OnboardingRun.objects.next_due_at`).
                attempt=run_onboarding,
                due_rows=runs_needing_a_worker,
                explainer=explain_run,
                explain_as="run",
                panel_title="Supplier onboarding",
                panel_order=20,
                panel=console.render_panel,
                latency=console.recent_step_durations,
                latency_group="step",
                metrics=console.collect_metrics,
            )
        )
        # What the retention purge may delete of this app's history (weave.retention).
        retention.register()

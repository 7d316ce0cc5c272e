from django.apps import AppConfig, apps


class WeaveConfig(AppConfig):
    name = "weave"
    verbose_name = "Weave"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from weave import checks  # noqa: F401  (registers the system checks)
        from weave.worker_db import connect_signals

        # Worker processes only: their PostgreSQL sessions get the WORKER_DB_* limits (issue 17).
        connect_signals()

        from weave.dashboard import register_admin, register_core_panels
        from weave.metrics import collect_lease_metrics
        from weave.telemetry import register_metrics

        register_core_panels()
        register_metrics("weave.leases", collect_lease_metrics)
        if apps.is_installed("django.contrib.admin"):
            register_admin()

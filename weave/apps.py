from django.apps import AppConfig


class WeaveConfig(AppConfig):
    name = "weave"
    verbose_name = "Weave"

    def ready(self) -> None:
        from weave import checks  # noqa: F401  (registers the system checks)
        from weave.worker_db import connect_signals

        # Worker processes only: their PostgreSQL sessions get the WORKER_DB_* limits (issue 17).
        connect_signals()

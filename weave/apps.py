from django.apps import AppConfig


class WeaveConfig(AppConfig):
    name = "weave"
    verbose_name = "Weave"

    def ready(self) -> None:
        from weave import checks  # noqa: F401  (registers the system checks)

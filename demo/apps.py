from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The standalone site: its management commands (demo data, fake servers, the chaos runner)."""

    name = "demo"
    label = "weave_demo"
    verbose_name = "Weave demo site"

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    """The host site's own app labelled "notifications": Weave's apps must install beside it."""

    name = "alerts"
    label = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class LeaseTestConfig(AppConfig):
    name = "tests.leasetest"
    label = "leasetest"
    default_auto_field = "django.db.models.BigAutoField"

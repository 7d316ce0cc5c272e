from django.apps import AppConfig


class OnboardingConfig(AppConfig):
    name = "onboarding"
    verbose_name = "Supplier onboarding"
    default_auto_field = "django.db.models.BigAutoField"

"""Create or update the django-q2 schedules that Weave apps registered (safe to run on every deploy)."""

from django.core.management.base import BaseCommand

from weave.schedules import ensure_schedules


class Command(BaseCommand):
    help = "Create or update the registered django-q2 schedules (idempotent)."

    def handle(self, *args: object, **options: object) -> None:
        results = ensure_schedules()
        if not results:
            self.stdout.write("No schedules registered.")
        for name, what in results:
            self.stdout.write(f"{name}: {what}")

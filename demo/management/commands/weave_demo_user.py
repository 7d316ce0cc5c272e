"""Create (or reset) the demo superuser so `make run` always prints a working login."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create or reset a superuser for the local demo."

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)

    def handle(self, *args, username: str, password: str, **options):
        User = get_user_model()
        lookup: dict[str, Any] = {User.USERNAME_FIELD: username}
        user, created = User._default_manager.get_or_create(**lookup)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(f"{'Created' if created else 'Reset'} demo superuser {username!r}.")

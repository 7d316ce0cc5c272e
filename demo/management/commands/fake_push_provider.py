"""The webhook fake alone: `manage.py weave_fake_push --serve webhook` under its older name (the benchmarks use it)."""

from notifications.management.commands.weave_fake_push import Command as FakePush


class Command(FakePush):
    help = "Run the fake webhook push provider (weave_fake_push --serve webhook). Ctrl-C stops it."
    serve_default = "webhook"

"""`manage.py weave_explain notification <id>` / `weave_explain run <id>`: one job's story."""

from django.apps import apps
from django.core.exceptions import ObjectDoesNotExist
from django.core.management.base import BaseCommand, CommandError

# kind -> (app that must be installed, "module:function" returning a weave.timeline.Timeline)
EXPLAINERS = {
    "notification": ("notifications", "notifications.explain:explain_notification"),
    "run": ("onboarding", "onboarding.explain:explain_run"),
}


class Command(BaseCommand):
    help = "Print one job's timeline (claims, attempts, receipts, current holder) and a plain summary."

    def add_arguments(self, parser):
        parser.add_argument("kind", choices=sorted(EXPLAINERS))
        parser.add_argument("id", type=int)

    def handle(self, *args, kind: str, id: int, **options):
        app, target = EXPLAINERS[kind]
        if not apps.is_installed(app):
            raise CommandError(f"The {app} app is not installed; there are no {kind}s to explain.")
        module, function = target.split(":")
        explain = getattr(__import__(module, fromlist=[function]), function)
        try:
            timeline = explain(id)
        except ObjectDoesNotExist as exc:
            raise CommandError(f"No {kind} with id {id}.") from exc
        self.stdout.write(timeline.as_text())

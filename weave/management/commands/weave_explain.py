"""`manage.py weave_explain notification <id>` / `weave_explain run <id>`: one job's story."""

from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.core.management.base import BaseCommand, CommandError

from weave.explain import explainers


class Command(BaseCommand):
    help = "Print one job's timeline (claims, attempts, receipts, current holder) and a plain summary."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("kind", choices=sorted(explainers()) or None)
        parser.add_argument("id", type=int)

    def handle(self, *args: Any, kind: str, id: int, **options: Any) -> None:
        explain = explainers().get(kind)
        if explain is None:
            raise CommandError(f"No app that explains {kind!r} jobs is installed.")
        try:
            timeline = explain(id)
        except ObjectDoesNotExist as exc:
            raise CommandError(f"No {kind} with id {id}.") from exc
        self.stdout.write(timeline.as_text())

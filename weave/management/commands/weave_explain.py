"""`manage.py weave_explain notification <id>` / `weave_explain run <id>`: one job's story.

The id is a row number, or for a task also the result id Django gave (`TaskResult.id`).
"""

from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.core.management.base import BaseCommand, CommandError

from weave.explain import explainers


class Command(BaseCommand):
    help = "Print one job's timeline (claims, attempts, receipts, current holder) and a plain summary."
    # Read-only and asked for while diagnosing: it prints its own answer, not the site's check warnings
    # (`manage.py check` says those).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("kind", choices=sorted(explainers()) or None)
        parser.add_argument("id", help="the job's number (a task: its number or the result id Django gave)")

    def handle(self, *args: Any, kind: str, id: str, **options: Any) -> None:
        explain = explainers().get(kind)
        if explain is None:
            raise CommandError(f"No app that explains {kind!r} jobs is installed.")
        key: int | str = int(id) if id.strip().isdigit() else id.strip()
        try:
            timeline = explain(key)  # type: ignore[arg-type]  # a task's explainer also takes a result id
        except ObjectDoesNotExist as exc:
            raise CommandError(f"No {kind} with id {id}.") from exc
        except (TypeError, ValueError) as exc:
            raise CommandError(f"No {kind} with id {id}: {kind} ids are numbers.") from exc
        self.stdout.write(timeline.as_text())

"""`manage.py weave_demo_outage`: now and then take the fake push provider down for a few seconds.

The demo's answer to "the breaker never opens": every so often it tells the fake provider (its
`POST /_config`) to answer every push with a 503, queues a handful of demo notifications so a worker
meets the outage, and puts the provider's faults back after `--seconds`. The worker's breaker opens,
the batch hands its unstarted rows back, and the dashboard shows the opening, its reason and the
waiting backlog tied to it; the rows are delivered once the provider answers again.

Demo only: it talks to the fake provider on 127.0.0.1 and creates notifications to demo phone tokens.
"""

import json
import random
import time
import urllib.request
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

DEMO_TOKEN = "demo-device-outage-"


def _config(base: str, change: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read the fake provider's faults, or change them (POST /_config answers with the new ones)."""
    body = json.dumps(change or {}).encode()
    request = urllib.request.Request(f"{base}/_config", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (a local fake, http on purpose)
        answer: dict[str, Any] = json.loads(response.read())
        return answer


class Command(BaseCommand):
    help = "Demo fault: now and then make the fake push provider answer 503 for a few seconds (the breaker opens)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--provider", default="http://127.0.0.1:8100", help="The fake provider's base URL.")
        parser.add_argument("--every", type=float, default=60.0, help="Mean seconds between outages.")
        parser.add_argument("--seconds", type=float, default=8.0, help="How long one outage lasts.")
        parser.add_argument(
            "--burst",
            type=int,
            default=None,
            help="Notifications queued into each outage (default: PUSH_BREAKER_MIN_ANSWERS + 6, enough to open it).",
        )
        parser.add_argument("--first-after", type=float, default=20.0, help="Seconds before the first outage.")
        parser.add_argument("--outages", type=int, default=0, help="Stop after this many (0: run forever).")

    def handle(
        self, *args: Any, provider: str, every: float, seconds: float, burst: int | None, **options: Any
    ) -> None:
        from django.db import transaction

        from notifications.services import notification_create
        from weave.conf import weave_settings

        # A breaker judges one worker's answers, and opens only once its window holds PUSH_BREAKER_MIN_ANSWERS:
        # a smaller burst, or one trickling in over several drains, would never open it.
        burst = burst if burst is not None else int(weave_settings.PUSH_BREAKER_MIN_ANSWERS) + 6
        rng = random.Random()
        wait, done = float(options["first_after"]), 0
        while not options["outages"] or done < options["outages"]:
            time.sleep(wait)
            wait = rng.uniform(0.7, 1.3) * every
            try:
                before = _config(provider)
                _config(provider, {"rate_5xx": 1.0, "rate_429": 0.0})
            except OSError as exc:  # a demo fault must never take the demo down
                self.stderr.write(f"outage: the fake provider did not answer ({exc}); trying again later")
                continue
            try:
                with transaction.atomic():  # visible at once, so one worker claims the burst as one batch
                    for i in range(burst):
                        notification_create(
                            device_token=f"{DEMO_TOKEN}{done}-{i}",
                            title=f"During outage {done + 1}",
                            body="Queued while the fake provider answers 503: the breaker opens, then it is delivered.",
                        )
                self.stdout.write(
                    f"outage {done + 1}: the fake provider answers 503 for {seconds:g} s; {burst} notifications queued"
                )
                time.sleep(seconds)
            finally:
                _config(provider, {k: before[k] for k in ("rate_5xx", "rate_429") if k in before})
            done += 1

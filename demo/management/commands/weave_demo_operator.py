"""`manage.py weave_demo_operator`: a scripted operator, so the demo shows what people do too.

Without it, a failed run stays failed until someone fixes its cause and retries, and no run is held
for the stall fault to freeze until someone starts one. This command is that someone, a named staff
user ("demo-operator", no password: it cannot log in), acting only through what the admin itself
calls (`onboarding.admin.start_recorded`, `retry_recorded`: the real services, and the admin history
the timelines read), so every run's story shows "started by demo-operator" or "reopened by
demo-operator: <its note>" as it would for a person.

What it does, once each:

- after `--start-after` seconds, starts onboarding for one supplier that never had a run (the first
  of the demo's, in name order), leaving the others for you to start;
- once the run of the supplier whose bank account is closed has been failed for `--fix-after`
  seconds, corrects that supplier's IBAN (written to the supplier's history too) and retries the run
  with a note saying what was fixed. The run resumes after its last receipt and completes.

It then keeps watching (a later failure of that supplier's run at the bank step, with the closed
account back in place, is fixed the same way) until it is stopped.
"""

import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DatabaseError

from demo.management.commands.weave_demo_data import CLOSED_ACCOUNT_IBAN, CORRECTED_IBAN
from demo.people import demo_operator

FIX_NOTE = "IBAN corrected: the supplier sent its new account number (the old account is closed)."


class Command(BaseCommand):
    help = "Demo: a scripted operator starts one onboarding run and fixes and retries the failed one."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--start-after", type=float, default=8.0, help="Seconds before it starts a run.")
        parser.add_argument("--fix-after", type=float, default=15.0, help="Seconds a run stays failed first.")
        parser.add_argument("--once", action="store_true", help="Stop once both things are done (for tests).")

    def handle(self, *args: Any, start_after: float, fix_after: float, once: bool, **options: Any) -> None:
        began = time.monotonic()
        started = fixed = False
        while not (once and started and fixed):
            try:
                if not started and time.monotonic() - began >= start_after:
                    started = self.start_one()
                fixed = self.fix_failed(fix_after) or fixed
            except DatabaseError as exc:  # a demo actor must never take the demo down: say so, try again
                self.stderr.write(f"demo-operator: skipped after a database error: {exc}")
            time.sleep(1.0)

    def start_one(self) -> bool:
        """Start onboarding for the first demo supplier that never had a run; True once done (or none left)."""
        from onboarding.admin import start_recorded
        from onboarding.models import Supplier

        supplier = Supplier.objects.filter(onboarding_runs__isnull=True).order_by("legal_name").first()
        if supplier is None:
            return True
        run = start_recorded(supplier=supplier, user=demo_operator())
        self.stdout.write(f"demo-operator: started onboarding run {run.pk} for {supplier}")
        return True

    def fix_failed(self, fix_after: float) -> bool:
        """Fix and retry the closed-account supplier's run once it has been failed for `fix_after` s."""
        from datetime import timedelta

        from onboarding.admin import retry_recorded
        from onboarding.models import OnboardingRun
        from weave.admin import record_operator_action
        from weave.telemetry import db_now

        run = (
            OnboardingRun.objects.filter(
                status=OnboardingRun.Status.FAILED,
                failure_fixable=True,
                supplier__iban=CLOSED_ACCOUNT_IBAN,
                finished_at__lte=db_now() - timedelta(seconds=fix_after),
            )
            .select_related("supplier")
            .order_by("pk")
            .first()
        )
        if run is None:
            return False
        user = demo_operator()
        supplier = run.supplier
        supplier.iban = CORRECTED_IBAN
        supplier.save(update_fields=["iban"])
        record_operator_action(user_id=user.pk, obj=supplier, message="Changed IBAN: the supplier sent a new one.")
        reopened = retry_recorded(run=run, user=user, why=FIX_NOTE)
        self.stdout.write(
            f"demo-operator: corrected the IBAN of {supplier} and retried run {run.pk} (re-opened under fence "
            f"{reopened.fence})"
        )
        return True

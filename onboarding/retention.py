"""What retention may delete of the onboarding history (registered with `weave.retention` at startup).

- attempts of finished runs (completed, failed, cancelled, held by no worker) that ended before the
  cutoff, the run itself having finished before it too;
- finished runs (held by no worker) finished before the cutoff, with their attempts and their step
  receipts (a receipt is kept exactly as long as its run). A run that a business record (vendor
  record, payment terms, bank account) points to is kept: it is that record's provenance.
"""

from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet

from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, RunAttempt, StepReceipt, VendorRecord
from weave.operations import PurgeSpec, register_purge

FINISHED = ("completed", "failed", "cancelled")


def old_runs(cutoff: datetime) -> "QuerySet[OnboardingRun]":
    runs = OnboardingRun.objects.filter(status__in=FINISHED, owner__isnull=True, finished_at__lt=cutoff)
    # Provenance of business records: never purged while a record points at the run.
    runs = runs.exclude(pk__in=VendorRecord.objects.values("run_id"))
    runs = runs.exclude(pk__in=PaymentTerms.objects.values("run_id"))
    return runs.exclude(pk__in=BankAccount.objects.values("run_id"))


def old_run_attempts(cutoff: datetime) -> "QuerySet[RunAttempt]":
    return RunAttempt.objects.filter(
        run__status__in=FINISHED, run__owner__isnull=True, run__finished_at__lt=cutoff, ended_at__lt=cutoff
    )


def by_outcome(attempts: "QuerySet[RunAttempt]") -> dict[str, int]:
    return dict(attempts.order_by().values_list("outcome").annotate(n=Count("pk")))


def _dependants_first(runs: "QuerySet[Any]") -> dict[str, dict[str, int]]:
    attempts = RunAttempt.objects.filter(run__in=runs.values("pk"))
    receipts = StepReceipt.objects.filter(run__in=runs.values("pk"))
    counts = {"run_attempts": by_outcome(attempts), "receipts": {"": receipts.count()}}
    attempts._raw_delete(attempts.db)
    receipts._raw_delete(receipts.db)
    return counts


def register() -> None:
    register_purge(
        PurgeSpec(
            kind="run_attempts",
            model=RunAttempt,
            order=40,
            candidates=old_run_attempts,
            labels=by_outcome,
            lock_of=("self", "run"),  # the run's state decides: it is locked and re-checked too
        )
    )
    register_purge(
        PurgeSpec(
            kind="runs",
            model=OnboardingRun,
            order=50,
            candidates=old_runs,
            before=_dependants_first,
            ordering=("finished_at",),
        )
    )

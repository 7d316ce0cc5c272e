"""Suppliers, the purchasing and setup rows onboarding writes, and the runs that write them."""

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Case, F, Min, Q, When

from weave.leases import Clock, LeasedModel, LeaseQuerySet, default_clock
from weave.models import DatabaseNow


class Supplier(models.Model):
    legal_name = models.CharField(max_length=200)
    country = models.CharField(max_length=2, help_text="ISO 3166 alpha-2 code.")
    tax_id = models.CharField(max_length=40)
    contact_email = models.EmailField()
    # The contact's phone: the welcome notification goes to it.
    device_token = models.CharField(max_length=512, blank=True)
    iban = models.CharField("IBAN", max_length=34, blank=True)
    bic = models.CharField("BIC", max_length=11, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["legal_name", "pk"]
        permissions = [("start_onboarding", "Can start supplier onboarding")]

    def __str__(self) -> str:
        return self.legal_name


class VendorRecord(models.Model):
    """The purchasing system's vendor: one per supplier, with its own vendor number."""

    supplier = models.OneToOneField(Supplier, on_delete=models.CASCADE, related_name="vendor_record")
    vendor_number = models.CharField(max_length=20, unique=True)
    # The run and fence whose guarded save wrote this row: audits check no stale fence wrote it.
    run = models.ForeignKey("OnboardingRun", on_delete=models.PROTECT, related_name="+")
    fence = models.BigIntegerField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"Vendor {self.vendor_number}"


class PaymentTerms(models.Model):
    supplier = models.OneToOneField(Supplier, on_delete=models.CASCADE, related_name="payment_terms")
    net_days = models.PositiveSmallIntegerField()
    currency = models.CharField(max_length=3)
    run = models.ForeignKey("OnboardingRun", on_delete=models.PROTECT, related_name="+")
    fence = models.BigIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "payment terms"

    def __str__(self) -> str:
        return f"Net {self.net_days} in {self.currency}"


class BankAccount(models.Model):
    """A bank account verified by the supplier services, kept by its reference there."""

    supplier = models.OneToOneField(Supplier, on_delete=models.CASCADE, related_name="bank_account")
    reference = models.CharField(max_length=64)
    last4 = models.CharField(max_length=4)
    run = models.ForeignKey("OnboardingRun", on_delete=models.PROTECT, related_name="+")
    fence = models.BigIntegerField()
    verified_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"Bank account {self.reference} (…{self.last4})"


class OnboardingRunQuerySet(LeaseQuerySet["OnboardingRun"]):
    def active(self) -> "OnboardingRunQuerySet":
        """Runs not yet finished: pending or running."""
        return self.filter(status__in=OnboardingRun.ACTIVE)

    def undo_requested(self) -> "OnboardingRunQuerySet":
        """Cancelled runs whose committed steps an operator asked to undo, not done yet."""
        return self.filter(status=OnboardingRun.Status.CANCELLED, undo_state=OnboardingRun.Undo.REQUESTED)

    def claimable(self) -> "OnboardingRunQuerySet":
        """What a worker may claim: active runs, and cancelled runs waiting for their undo."""
        return self.filter(
            Q(status__in=OnboardingRun.ACTIVE)
            | Q(status=OnboardingRun.Status.CANCELLED, undo_state=OnboardingRun.Undo.REQUESTED)
        )

    def due(self, clock: Clock = default_clock) -> "OnboardingRunQuerySet":
        """Runs not waiting out a retry delay: no `next_attempt_at`, or it has come by the database clock."""
        return self.filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=clock.now()))

    def needing_a_worker(self, clock: Clock = default_clock) -> "OnboardingRunQuerySet":
        """Claimable runs nobody holds under a live lease and not waiting out a retry delay: pending, released
        (once due again), crashed, or waiting to undo."""
        return self.claimable().free_or_expired(clock).due(clock)

    def next_due_at(self) -> datetime | None:
        """The earliest database time at which a claimable run needs a worker, or None if there is none.

        A free run is due at its `next_attempt_at` (its creation when it has none); a held run when its
        lease ends (if the holder dies, the run needs a worker then). The due-time watcher sleeps until it.
        """
        at = Case(
            When(owner__isnull=False, then=F("lease_expires_at")),
            When(next_attempt_at__isnull=False, then=F("next_attempt_at")),
            default=F("created_at"),
        )
        earliest: datetime | None = self.claimable().aggregate(at=Min(at))["at"]
        return earliest


class OnboardingRun(LeasedModel):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Undo(models.TextChoices):
        NONE = "", "not asked"
        REQUESTED = "requested"
        DONE = "done"
        FAILED = "failed"

    ACTIVE = (Status.PENDING, Status.RUNNING)

    supplier = models.ForeignKey(Supplier, on_delete=models.PROTECT, related_name="onboarding_runs")
    # The name of the last completed step; "" before the first. Every phase save checks it.
    phase = models.CharField(max_length=40, blank=True, default="", editable=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True, help_text="Why the run is where it is, for a person.")
    # The database's clock, as every time of the run's story (`weave_explain`).
    created_at = models.DateTimeField(db_default=DatabaseNow(), editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Database time at which a run released on a temporary failure is due again; None: due at once.
    next_attempt_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The steps this run takes (dotted paths), recorded when it started: a changed setting never
    # reshapes a run in flight.
    plan = models.JSONField(default=list, blank=True, editable=False)
    # How often "Retry failed run" re-opened it; part of the idempotency keys from then on.
    reopened = models.PositiveIntegerField(default=0, editable=False)
    # Where and how a failed run failed, stored rather than read back out of the reason.
    failed_step = models.CharField(max_length=40, blank=True, default="", editable=False)
    failure_fixable = models.BooleanField(default=True, editable=False)
    undo_state = models.CharField(max_length=10, choices=Undo.choices, blank=True, default="", editable=False)

    objects = OnboardingRunQuerySet.as_manager()  # type: ignore[misc]  # replaces the abstract base's manager

    class Meta:
        ordering = ["-pk"]
        permissions = [
            ("retry_run", "Can re-open a failed onboarding run"),
            ("undo_run", "Can cancel an onboarding run and undo its committed steps"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["supplier"],
                condition=Q(status__in=["pending", "running"]),
                name="onb_one_active_run_per_supplier",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "running", "completed", "failed", "cancelled"]),
                name="onb_run_status_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "lease_expires_at"], name="onb_run_sweep_idx"),
            # The console: runs by status and step, and lease counts over held rows only.
            models.Index(fields=["status", "phase"], name="onb_run_status_phase_idx"),
            models.Index(fields=["lease_expires_at"], condition=Q(owner__isnull=False), name="onb_run_held_idx"),
            # Retention's pick and backlog: finished runs by finish time, a range however long the history.
            models.Index(
                fields=["finished_at", "id"], condition=Q(finished_at__isnull=False), name="onb_run_finished_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"Onboarding run {self.pk} for {self.supplier} ({self.status})"


class StepReceipt(models.Model):
    """Proof that a step's guarded save landed, written in the same transaction."""

    run = models.ForeignKey(OnboardingRun, on_delete=models.CASCADE, related_name="receipts")
    step = models.CharField(max_length=40)
    fence = models.BigIntegerField()
    owner = models.CharField(max_length=100)
    completed_at = models.DateTimeField(help_text="Database clock.")
    output = models.JSONField(default=dict, blank=True)
    # Set by the guarded transaction that ran the step's undo ("Cancel and undo").
    undone_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")
    undone_fence = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "completed_at", "pk"]
        # Step durations of the last day (lease TTL advice per step) are read by completion time.
        indexes = [models.Index(fields=["completed_at"], name="onb_receipt_completed_idx")]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="onb_one_receipt_per_step")]

    def __str__(self) -> str:
        return f"Receipt for {self.step} of run {self.run_id} at fence {self.fence}"


class RunAttempt(models.Model):
    """One claim of a run by one worker, and how it ended."""

    class Outcome(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        # Gave the run back for a later attempt: temporary failure, budget spent, or cancelled.
        RELEASED = "released"
        FAILED = "failed"
        # Lost its lease: another worker holds the run now. Wrote nothing else.
        BLOCKED = "blocked"
        # Found still running with an expired lease by the next claim: the worker died or stalled.
        CRASHED = "crashed"

    run = models.ForeignKey(OnboardingRun, on_delete=models.CASCADE, related_name="attempts")
    fence = models.BigIntegerField()
    owner = models.CharField(max_length=100)
    started_at = models.DateTimeField(help_text="Database clock.")
    ended_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.RUNNING)
    reason = models.TextField(blank=True)
    # For a released attempt: the database time its run was due again (what the next claim is measured against).
    retry_due_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")

    class Meta:
        ordering = ["run", "fence", "pk"]
        indexes = [
            models.Index(fields=["outcome", "run"], name="onb_attempt_outcome_idx"),
            # The console's last-24-hours views and the metrics' running counts read by end time.
            models.Index(fields=["ended_at", "outcome"], name="onb_attempt_ended_idx"),
        ]

    def __str__(self) -> str:
        return f"Attempt at fence {self.fence} on run {self.run_id}: {self.outcome}"

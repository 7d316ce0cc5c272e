"""The onboarding steps, in order. Each has a slow part and a commit part.

- `work(ctx) -> output`: the slow part. It may call the supplier services (under the heartbeat)
  but writes nothing to the database: a worker that loses its lease mid-step must leave no trace.
- `commit(ctx, output) -> extra output`: the domain writes. The runner calls it inside the one
  transaction that starts with the guarded phase save, so a refused save rolls it back.

The runner saves each step's output (plus what `commit` adds) as the step's receipt.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from notifications.services import NOTIFICATION_TITLE_MAX, notification_check, notification_create
from onboarding.client import SupplierServices
from onboarding.errors import BusinessRefusal, PermanentFailure
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, Supplier, VendorRecord
from weave.leases import Clock, Heartbeat, Lease

Output = dict[str, Any]


@dataclass
class StepContext:
    """What a step may use: the run, its supplier, the lease, the clock and the services client."""

    run: OnboardingRun
    supplier: Supplier
    lease: Lease
    clock: Clock
    step: "Step"
    services: Callable[[], SupplierServices]
    heartbeat: Heartbeat | None = None
    outputs: dict[str, Output] = field(default_factory=dict)  # earlier steps' receipts

    @property
    def idempotency_key(self) -> str:
        """The key for this step's external call: the same for every attempt at (run, step)."""
        return idempotency_key(self.run.pk, self.step.name)

    def call(self, path: str, payload: dict[str, Any]) -> tuple[int, Output]:
        """POST to the supplier services under this step's key, renewing-aware and retrying."""
        log = {"job": "onboarding", "id": self.run.pk, "owner": self.lease.owner, "fence": self.lease.fence}
        return self.services().post(path, payload, key=self.idempotency_key, heartbeat=self.heartbeat, log=log)


def idempotency_key(run_id: Any, step_name: str) -> str:
    """Return the Idempotency-Key for the external call of `step_name` in run `run_id`."""
    return f"weave-onboarding:{run_id}:{step_name}"


def _nothing(ctx: StepContext) -> Output:
    return {}


def _no_writes(ctx: StepContext, output: Output) -> Output:
    return {}


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    work: Callable[[StepContext], Output] = _nothing
    commit: Callable[[StepContext, Output], Output | None] = _no_writes


# --- 1. verify tax id ---------------------------------------------------------------------------


def verify_tax_id(ctx: StepContext) -> Output:
    supplier = ctx.supplier
    _, answer = ctx.call("/tax-ids/verify", {"country": supplier.country, "tax_id": supplier.tax_id})
    if not answer.get("valid"):
        raise BusinessRefusal(
            f"Tax id {supplier.tax_id} ({supplier.country}) is invalid: {answer.get('reason') or 'no reason given'}."
        )
    return {"valid": True, "idempotency_key": ctx.idempotency_key}


# --- 2. sanctions screening ----------------------------------------------------------------------


def screen_sanctions(ctx: StepContext) -> Output:
    supplier = ctx.supplier
    _, answer = ctx.call("/sanctions/screen", {"name": supplier.legal_name, "country": supplier.country})
    if answer.get("hit"):
        raise BusinessRefusal(
            f"Sanctions screening hit on {answer.get('list', 'a sanctions list')}: "
            f"{answer.get('reason') or supplier.legal_name}."
        )
    return {"hit": False, "list": answer.get("list", ""), "idempotency_key": ctx.idempotency_key}


# --- 3. vendor record (purchasing) ---------------------------------------------------------------


def create_vendor_record(ctx: StepContext, output: Output) -> Output:
    # A supplier keeps its vendor number; a later run after a cancelled one reuses the row.
    vendor, _ = VendorRecord.objects.update_or_create(
        supplier=ctx.supplier,
        defaults={"run": ctx.run, "fence": ctx.lease.fence},
        create_defaults={
            "vendor_number": f"V{ctx.supplier.pk:07d}",
            "run": ctx.run,
            "fence": ctx.lease.fence,
            "created_at": ctx.clock.now(),
        },
    )
    return {"vendor_number": vendor.vendor_number}


# --- 4. payment terms (setup) --------------------------------------------------------------------

_TERMS_BY_COUNTRY = {"DE": (30, "EUR"), "FR": (45, "EUR"), "NL": (30, "EUR"), "GB": (30, "GBP"), "US": (30, "USD")}


def set_payment_terms(ctx: StepContext, output: Output) -> Output:
    net_days, currency = _TERMS_BY_COUNTRY.get(ctx.supplier.country.upper(), (60, "EUR"))
    PaymentTerms.objects.update_or_create(
        supplier=ctx.supplier,
        defaults={
            "net_days": net_days,
            "currency": currency,
            "run": ctx.run,
            "fence": ctx.lease.fence,
            "created_at": ctx.clock.now(),
        },
    )
    return {"net_days": net_days, "currency": currency}


# --- 5. bank account -----------------------------------------------------------------------------


def verify_bank_account(ctx: StepContext) -> Output:
    supplier = ctx.supplier
    if not supplier.iban:
        raise BusinessRefusal(f"{supplier.legal_name} has no IBAN on file to register.")
    status, answer = ctx.call("/bank-accounts", {"holder": supplier.legal_name, "iban": supplier.iban})
    if status == 422:
        raise BusinessRefusal(f"Bank account refused: {answer.get('error') or 'no reason given'}.")
    return {
        "reference": str(answer.get("reference", "")),
        "last4": str(answer.get("last4", "")),
        "idempotency_key": ctx.idempotency_key,
    }


def store_bank_account(ctx: StepContext, output: Output) -> Output:
    BankAccount.objects.update_or_create(
        supplier=ctx.supplier,
        defaults={
            "reference": output["reference"],
            "last4": output["last4"],
            "run": ctx.run,
            "fence": ctx.lease.fence,
            "verified_at": ctx.clock.now(),
        },
    )
    return {}


# --- 6. welcome notification ---------------------------------------------------------------------


WELCOME_PREFIX = "Welcome aboard, "


def welcome_message(supplier: Supplier, run: OnboardingRun) -> dict[str, Any]:
    """The welcome notification's arguments. The title fits whatever the legal name's length."""
    room = NOTIFICATION_TITLE_MAX - len(WELCOME_PREFIX)
    name = supplier.legal_name if len(supplier.legal_name) <= room else supplier.legal_name[: room - 1] + "…"
    return {
        "device_token": supplier.device_token,
        "title": WELCOME_PREFIX + name,
        "body": "Your supplier account is set up. You can now receive purchase orders.",
        "data": {"supplier_id": supplier.pk, "onboarding_run_id": run.pk},
    }


def preflight(run: OnboardingRun, supplier: Supplier) -> None:
    """Raise `PermanentFailure` now if a later step's commit part could not succeed with this supplier.

    Runs before the first external call or domain write, so a run never fails halfway through for
    a reason that was knowable at the start.
    """
    if not supplier.iban:
        raise BusinessRefusal(f"{supplier.legal_name} has no IBAN on file to register.")
    if supplier.device_token:
        try:
            notification_check(**welcome_message(supplier, run))
        except ValidationError as exc:
            raise PermanentFailure(f"The welcome notification would be refused: {'; '.join(exc.messages)}") from exc


def send_welcome(ctx: StepContext, output: Output) -> Output:
    supplier = ctx.supplier
    if not supplier.device_token:
        return {"skipped": "the supplier's contact has no device token"}
    # notification_create enqueues delivery with on_commit: a refused save rolls the send back too.
    try:
        notification = notification_create(**welcome_message(supplier, ctx.run))
    except ValidationError as exc:
        # Raised inside the guarded transaction, so the phase save is rolled back with it.
        raise PermanentFailure(f"The welcome notification was refused: {'; '.join(exc.messages)}") from exc
    return {"notification_id": notification.pk}


STEPS: tuple[Step, ...] = (
    Step("verify_tax_id", "Verify tax id", work=verify_tax_id),
    Step("screen_sanctions", "Sanctions screening", work=screen_sanctions),
    Step("create_vendor_record", "Create vendor record", commit=create_vendor_record),
    Step("set_payment_terms", "Set payment terms", commit=set_payment_terms),
    Step("register_bank_account", "Register bank account", work=verify_bank_account, commit=store_bank_account),
    Step("send_welcome_notification", "Send welcome notification", commit=send_welcome),
)
STEP_NAMES: tuple[str, ...] = tuple(step.name for step in STEPS)

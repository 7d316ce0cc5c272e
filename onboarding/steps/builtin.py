"""The six built-in steps, the default plan (`WEAVE["ONBOARDING_STEPS"]`).

The supplier's numbers were validated before the run could start (`onboarding.validation`); the
outside services here confirm them (registered, not sanctioned, account open), they never discover
a malformed one. Each step re-checks locally before its call anyway, in case the row was edited
behind the form's back.
"""

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from notifications.services import NOTIFICATION_TITLE_MAX, notification_check, notification_create
from onboarding.errors import BusinessRefusal, PermanentFailure
from onboarding.models import BankAccount, OnboardingRun, PaymentTerms, Supplier, VendorRecord
from onboarding.steps.protocol import Output, StepContext
from onboarding.validation import validate_supplier
from weave.jobs import Step


def _recheck(ctx: StepContext, *fields: str) -> None:
    try:
        validate_supplier(ctx.supplier, fields=fields)
    except ValidationError as exc:
        raise BusinessRefusal(f"{ctx.supplier.legal_name}: {'; '.join(exc.messages)}") from exc


# --- 1. verify tax id ---------------------------------------------------------------------------


def _verify_tax_id(ctx: StepContext) -> Output:
    supplier = ctx.supplier
    _recheck(ctx, "country", "tax_id")
    _, answer = ctx.post("/tax-ids/verify", {"country": supplier.country, "tax_id": supplier.tax_id})
    if not answer.get("valid"):
        raise BusinessRefusal(
            f"Tax id {supplier.tax_id} ({supplier.country}) is invalid: {answer.get('reason') or 'no reason given'}."
        )
    return {"valid": True, "idempotency_key": ctx.idempotency_key}


# --- 2. sanctions screening ----------------------------------------------------------------------


def _screen_sanctions(ctx: StepContext) -> Output:
    supplier = ctx.supplier
    _, answer = ctx.post("/sanctions/screen", {"name": supplier.legal_name, "country": supplier.country})
    if answer.get("hit"):
        # Not fixable by a retry of this run: clearing a hit is a compliance decision, and a new run
        # (after the supplier or the list changed) screens afresh.
        raise BusinessRefusal(
            f"Sanctions screening hit on {answer.get('list', 'a sanctions list')}: "
            f"{answer.get('reason') or supplier.legal_name}.",
            fixable=False,
        )
    return {"hit": False, "list": answer.get("list", ""), "idempotency_key": ctx.idempotency_key}


# --- 3. vendor record (purchasing) ---------------------------------------------------------------


def _create_vendor_record(ctx: StepContext, output: Output) -> Output:
    # A supplier keeps its vendor number; a later run after a cancelled one reuses the row.
    vendor, created = VendorRecord.objects.update_or_create(
        supplier=ctx.supplier,
        defaults={"run": ctx.run, "fence": ctx.fence},
        create_defaults={
            "vendor_number": f"V{ctx.supplier.pk:07d}",
            "run": ctx.run,
            "fence": ctx.fence,
            "created_at": ctx.now(),
        },
    )
    return {**output, "vendor_number": vendor.vendor_number, "created": created}


def _delete_if_created(model: type[models.Model]) -> Callable[[StepContext, Output], None]:
    def undo(ctx: StepContext, output: Output) -> None:
        # Only a row this run created goes; one it merely updated belonged to an earlier run.
        if output.get("created"):
            model._default_manager.filter(supplier=ctx.supplier, run=ctx.run).delete()

    return undo


# --- 4. payment terms (setup) --------------------------------------------------------------------

_TERMS_BY_COUNTRY = {"DE": (30, "EUR"), "FR": (45, "EUR"), "NL": (30, "EUR"), "GB": (30, "GBP"), "US": (30, "USD")}


def _set_payment_terms(ctx: StepContext, output: Output) -> Output:
    net_days, currency = _TERMS_BY_COUNTRY.get(ctx.supplier.country.upper(), (60, "EUR"))
    _, created = PaymentTerms.objects.update_or_create(
        supplier=ctx.supplier,
        defaults={
            "net_days": net_days,
            "currency": currency,
            "run": ctx.run,
            "fence": ctx.fence,
            "created_at": ctx.now(),
        },
    )
    return {**output, "net_days": net_days, "currency": currency, "created": created}


# --- 5. bank account -----------------------------------------------------------------------------


def _check_bank_account(ctx: StepContext) -> None:
    if not ctx.supplier.iban:
        raise BusinessRefusal(f"{ctx.supplier.legal_name} has no IBAN on file to register.")


def _verify_bank_account(ctx: StepContext) -> Output:
    supplier = ctx.supplier
    if not supplier.iban:
        raise BusinessRefusal(f"{supplier.legal_name} has no IBAN on file to register.")
    _recheck(ctx, "iban", "bic")
    status, answer = ctx.post("/bank-accounts", {"holder": supplier.legal_name, "iban": supplier.iban})
    if status == 422:
        raise BusinessRefusal(f"Bank account refused: {answer.get('error') or 'no reason given'}.")
    return {
        "reference": str(answer.get("reference", "")),
        "last4": str(answer.get("last4", "")),
        "idempotency_key": ctx.idempotency_key,
    }


def _store_bank_account(ctx: StepContext, output: Output) -> Output:
    _, created = BankAccount.objects.update_or_create(
        supplier=ctx.supplier,
        defaults={
            "reference": output["reference"],
            "last4": output["last4"],
            "run": ctx.run,
            "fence": ctx.fence,
            "verified_at": ctx.now(),
        },
    )
    return {**output, "created": created}


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


def _check_welcome(ctx: StepContext) -> None:
    if not ctx.supplier.device_token:
        return  # nothing will be sent
    try:
        notification_check(**welcome_message(ctx.supplier, ctx.run))
    except ValidationError as exc:
        raise PermanentFailure(f"The welcome notification would be refused: {'; '.join(exc.messages)}") from exc


def _send_welcome(ctx: StepContext, output: Output) -> Output:
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


# Each step is the core's `weave.jobs.Step`: `run` is the slow part (its outside call), `save` the writes
# inside the guarded transaction. No undo for the welcome: a sent message cannot be taken back; the run's
# page says so.
verify_tax_id = Step("verify_tax_id", run=_verify_tax_id, title="Verify tax id")
screen_sanctions = Step("screen_sanctions", run=_screen_sanctions, title="Sanctions screening")
create_vendor_record = Step(
    "create_vendor_record",
    save=_create_vendor_record,
    undo=_delete_if_created(VendorRecord),
    title="Create vendor record",
)
set_payment_terms = Step(
    "set_payment_terms", save=_set_payment_terms, undo=_delete_if_created(PaymentTerms), title="Set payment terms"
)
register_bank_account = Step(
    "register_bank_account",
    run=_verify_bank_account,
    save=_store_bank_account,
    undo=_delete_if_created(BankAccount),
    check=_check_bank_account,
    title="Register bank account",
)
send_welcome_notification = Step(
    "send_welcome_notification", save=_send_welcome, check=_check_welcome, title="Send welcome notification"
)

STEPS: tuple[Step, ...] = (
    verify_tax_id,
    screen_sanctions,
    create_vendor_record,
    set_payment_terms,
    register_bank_account,
    send_welcome_notification,
)
STEP_NAMES: tuple[str, ...] = tuple(step.name for step in STEPS)

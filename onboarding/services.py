"""Public API of the onboarding app: start, resume, retry, cancel (and undo) and sweep runs."""

import logging
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, models, transaction
from django.db.models.functions import Coalesce

from onboarding import queue
from onboarding.errors import AlreadyOnboarded, RunAlreadyActive, RunNotRetryable
from onboarding.models import OnboardingRun, Supplier
from onboarding.steps.plan import configured_plan
from onboarding.validation import validate_supplier
from weave.edge import check_text
from weave.events import log_event
from weave.leases import Clock, LeaseBusy, NotClaimable, default_clock

logger = logging.getLogger("weave.onboarding")
Status = OnboardingRun.Status
Undo = OnboardingRun.Undo
RETRY_PERMISSION = "weave_onboarding.retry_run"
UNDO_PERMISSION = "weave_onboarding.undo_run"


def _enqueue(run_id: int) -> None:
    queue.enqueue_run(run_id)


def _check_user(value: Any, field: str) -> Any:
    """Return `value` as a saved user, or None for no one / an anonymous user; refuse anything else."""
    if value is None or isinstance(value, AnonymousUser):
        return None
    if not isinstance(value, get_user_model()):
        raise ValidationError({field: f"{field} must be a user or None, not {type(value).__name__}."})
    return value if value.pk is not None and value.is_authenticated else None


def _check_instance(value: Any, model: type[models.Model], field: str) -> None:
    """Refuse a missing, wrong or unsaved instance with a `ValidationError` naming the argument."""
    if value is None:
        raise ValidationError({field: f"A {field} is required (got None)."})
    if not isinstance(value, model):
        raise ValidationError({field: f"{field} must be a {model.__name__}, not {type(value).__name__}."})
    if value.pk is None:
        raise ValidationError({field: f"{field} must be saved first (it has no primary key)."})


def _check_flag(value: Any, field: str) -> None:
    if not isinstance(value, bool):
        raise ValidationError({field: f"{field} must be True or False, not {type(value).__name__}."})


def _who(user: Any) -> str:
    return str(getattr(user, "get_username", lambda: "")() or "an operator")


def _require(user: Any, permission: str, action: str) -> None:
    if user is None or not user.has_perm(permission):
        raise PermissionDenied(f"{_who(user)} may not {action}: it needs the {permission} permission.")


def onboarding_start(*, supplier: Supplier, started_by: Any = None, force: bool = False) -> OnboardingRun:
    """Create a pending run for `supplier` and enqueue it once the transaction commits.

    The supplier's country, tax id, IBAN and BIC are checked first: `ValidationError` (by field)
    and no run when one is malformed. Raises `RunAlreadyActive` if the supplier already has a
    pending or running run, and `AlreadyOnboarded` if it has a completed one, unless `force=True`
    (a new run sends a second welcome, so the caller must mean it).
    """
    _check_instance(supplier, Supplier, "supplier")
    user = _check_user(started_by, "started_by")
    _check_flag(force, "force")
    validate_supplier(supplier)
    with transaction.atomic():
        active = OnboardingRun.objects.active().filter(supplier=supplier).first()
        if active is not None:
            raise RunAlreadyActive(f"{supplier} already has onboarding run {active.pk} ({active.status}).")
        done = OnboardingRun.objects.filter(supplier=supplier, status=Status.COMPLETED).order_by("-pk").first()
        reason = "Waiting for a worker."
        if done is not None:
            if not force:
                raise AlreadyOnboarded(
                    f"{supplier} was already onboarded by run {done.pk}; starting again sends a second welcome "
                    "(pass force=True, or confirm in the admin).",
                    completed_run_id=done.pk,
                )
            reason = f"Re-onboarding confirmed by {_who(started_by)} (completed run {done.pk}). Waiting for a worker."
        try:
            # The partial unique constraint is the real guard; the check above only makes the usual message.
            with transaction.atomic():
                run = OnboardingRun.objects.create(
                    supplier=supplier, created_by=user, reason=reason, plan=configured_plan()
                )
        except IntegrityError as exc:
            raise RunAlreadyActive(f"{supplier} already has an active onboarding run.") from exc
        transaction.on_commit(partial(_enqueue, run.pk))
    log_event(logger, "start", job="onboarding", id=run.pk, supplier=supplier.pk, force=force)
    return run


def onboarding_resume(*, run: OnboardingRun) -> bool:
    """Enqueue an active run again; return False for a finished run (nothing to resume)."""
    _check_instance(run, OnboardingRun, "run")
    if run.status not in OnboardingRun.ACTIVE:
        return False
    # A person asking now overrides a retry delay (the worker's claim waits for `next_attempt_at`).
    OnboardingRun.objects.filter(pk=run.pk, status__in=OnboardingRun.ACTIVE).update(next_attempt_at=None)
    transaction.on_commit(partial(_enqueue, run.pk))
    return True


def onboarding_retry(*, run: OnboardingRun, retried_by: Any, why: str, clock: Clock = default_clock) -> OnboardingRun:
    """Re-open a failed run under a new fence; it resumes after its last receipt. Needs `retry_run`.

    For a failure someone fixed (the supplier's data corrected, a service configured): the
    supplier is validated again, the fence is bumped in one statement through the lease core, and
    the steps still to do ask the outside services with new idempotency keys. Refuses a completed,
    cancelled or active run, and a failure marked not fixable (a sanctions hit), with `RunNotRetryable`.
    """
    _check_instance(run, OnboardingRun, "run")
    _check_user(retried_by, "retried_by")
    _require(retried_by, RETRY_PERMISSION, "retry an onboarding run")
    why = check_text(why or "", field="why", max_chars=1000).strip()
    if not why:
        raise RunNotRetryable("Say why the run can go on now (what was fixed).")
    run.refresh_from_db()
    if run.status != Status.FAILED:
        raise RunNotRetryable(f"Run {run.pk} is {run.status}; only a failed run can be retried.")
    if not run.failure_fixable:
        raise RunNotRetryable(
            f"Run {run.pk} failed for a reason a retry cannot fix ({run.reason}). Start a new run instead."
        )
    validate_supplier(run.supplier)
    who = _who(retried_by)
    resume_at = f"after {run.phase}" if run.phase else "from the first step"
    try:
        with transaction.atomic():
            fence = OnboardingRun.objects.filter(status=Status.FAILED).reopen(
                run.pk,
                clock=clock,
                status=Status.PENDING,
                reopened=run.reopened + 1,
                finished_at=None,
                failed_step="",
                failure_fixable=True,
                reason=f"Re-opened by {who}: {why} Resumes {resume_at}; previously: {run.reason}",
            )
            transaction.on_commit(partial(_enqueue, run.pk))
    except IntegrityError as exc:
        raise RunAlreadyActive(f"{run.supplier} has another active run; run {run.pk} stays failed.") from exc
    except (LeaseBusy, NotClaimable) as exc:
        raise RunNotRetryable(f"Run {run.pk} changed meanwhile and was not re-opened: {exc}") from exc
    log_event(logger, "reopened", job="onboarding", id=run.pk, fence=fence, reason=f"by {who}: {why}")
    run.refresh_from_db()
    return run


def onboarding_cancel(
    *, run: OnboardingRun, cancelled_by: Any = None, undo: bool = False, clock: Clock = default_clock
) -> bool:
    """Cancel an active run; return False if nothing changed.

    Only the status changes, in one conditional statement. A worker holding the run is refused at
    its next guarded save (which expects status = running) and gives its lease back.

    `undo=True` ("Cancel and undo", needs `undo_run`) also asks for the committed steps' `undo`:
    a worker claims the cancelled run under a new fence and runs them, newest first. It applies to
    active and failed runs, and to a cancelled run whose undo was not asked yet or failed.
    """
    _check_instance(run, OnboardingRun, "run")
    _check_user(cancelled_by, "cancelled_by")
    _check_flag(undo, "undo")
    who = _who(cancelled_by)
    if undo:
        _require(cancelled_by, UNDO_PERMISSION, "cancel and undo an onboarding run")
        reason = f"Cancelled by {who}; undo of the committed steps requested."
        with transaction.atomic():
            changed = OnboardingRun.objects.filter(pk=run.pk, status__in=[*OnboardingRun.ACTIVE, Status.FAILED]).update(
                status=Status.CANCELLED, undo_state=Undo.REQUESTED, reason=reason, finished_at=clock.now()
            ) or OnboardingRun.objects.filter(
                pk=run.pk, status=Status.CANCELLED, undo_state__in=[Undo.NONE, Undo.FAILED]
            ).update(undo_state=Undo.REQUESTED, reason=reason)
            if changed:
                transaction.on_commit(partial(_enqueue, run.pk))
    else:
        changed = OnboardingRun.objects.filter(pk=run.pk, status__in=OnboardingRun.ACTIVE).update(
            status=Status.CANCELLED, reason=f"Cancelled by {who}.", finished_at=clock.now()
        )
    if changed:
        log_event(logger, "cancelled", job="onboarding", id=run.pk, reason=f"by {who}", undo=undo)
    return changed == 1


def runs_needing_a_worker() -> Any:
    """The runs an attempt should start on now, longest due first (what the engine's onboarding drain takes):
    a run waiting since it was started goes before an older run whose retry came due after it."""
    due_since = Coalesce("next_attempt_at", "created_at")
    return OnboardingRun.objects.needing_a_worker().order_by(due_since, "pk")


def onboarding_wake() -> None:
    """Ask for attempts when a run needs a worker now, as the engine's due-time watch does for onboarding:
    one request, since the engine's drain spreads the runs over the workers."""
    first = runs_needing_a_worker().values_list("pk", flat=True).first()
    if first is not None:
        _enqueue(first)


def onboarding_sweep(*, clock: Clock = default_clock, limit: int = 500) -> list[int]:
    """Find every claimable run nobody holds under a live lease (pending, released, crashed, or waiting
    for its undo), log each, and ask for attempts once the transaction commits; return their ids.

    Asking twice is harmless: the engine keeps one waiting drain, and a run another worker holds is skipped.
    """
    run_ids = list(OnboardingRun.objects.needing_a_worker(clock).order_by("pk").values_list("pk", flat=True)[:limit])
    for run_id in run_ids:
        log_event(logger, "requeue", job="onboarding", id=run_id, reason="sweep: pending, released or lease expired")
    if run_ids:
        transaction.on_commit(partial(_enqueue, run_ids[0]))
    return run_ids

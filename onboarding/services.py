"""Public API of the onboarding app: start, resume, cancel and sweep runs."""

import logging
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction

from onboarding import queue
from onboarding.errors import RunAlreadyActive
from onboarding.models import OnboardingRun, Supplier
from weave.events import log_event
from weave.leases import Clock, default_clock

logger = logging.getLogger("weave.onboarding")
Status = OnboardingRun.Status


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
    if value is None:
        raise ValidationError({field: f"A {field} is required (got None)."})
    if not isinstance(value, model):
        raise ValidationError({field: f"{field} must be a {model.__name__}, not {type(value).__name__}."})
    if value.pk is None:
        raise ValidationError({field: f"{field} must be saved first (it has no primary key)."})


def onboarding_start(*, supplier: Supplier, started_by: Any = None) -> OnboardingRun:
    """Create a pending run for `supplier` and enqueue it once the transaction commits.

    Raises `ValidationError` naming the argument for a missing or wrong supplier or user, and
    `RunAlreadyActive` if the supplier already has a pending or running run.
    """
    _check_instance(supplier, Supplier, "supplier")
    user = _check_user(started_by, "started_by")
    with transaction.atomic():
        active = OnboardingRun.objects.active().filter(supplier=supplier).first()
        if active is not None:
            raise RunAlreadyActive(f"{supplier} already has onboarding run {active.pk} ({active.status}).")
        try:
            # The partial unique constraint is the real guard; the check above only makes the usual message.
            with transaction.atomic():
                run = OnboardingRun.objects.create(supplier=supplier, created_by=user, reason="Waiting for a worker.")
        except IntegrityError as exc:
            raise RunAlreadyActive(f"{supplier} already has an active onboarding run.") from exc
        transaction.on_commit(partial(_enqueue, run.pk))
    log_event(logger, "start", job="onboarding", id=run.pk, supplier=supplier.pk)
    return run


def onboarding_resume(*, run: OnboardingRun) -> bool:
    """Enqueue an active run again; return False for a finished run (nothing to resume)."""
    _check_instance(run, OnboardingRun, "run")
    if run.status not in OnboardingRun.ACTIVE:
        return False
    transaction.on_commit(partial(_enqueue, run.pk))
    return True


def onboarding_cancel(*, run: OnboardingRun, cancelled_by: Any = None, clock: Clock = default_clock) -> bool:
    """Cancel an active run; return False if it had already finished.

    Only the status changes, in one conditional statement. A worker holding the run is refused at
    its next guarded save (which expects status = running) and gives its lease back.
    """
    _check_instance(run, OnboardingRun, "run")
    user = _check_user(cancelled_by, "cancelled_by")
    who = user.get_username() if user is not None else "an operator"
    changed = OnboardingRun.objects.filter(pk=run.pk, status__in=OnboardingRun.ACTIVE).update(
        status=Status.CANCELLED, reason=f"Cancelled by {who}.", finished_at=clock.now()
    )
    if changed:
        log_event(logger, "cancelled", job="onboarding", id=run.pk, reason=f"by {who}")
    return changed == 1


def onboarding_sweep(*, clock: Clock = default_clock, limit: int = 500) -> list[int]:
    """Enqueue every active run nobody holds under a live lease (pending, released or crashed); return their ids.

    Enqueueing a run twice is harmless: the second task finds it busy or finished and ends quietly.
    """
    run_ids = list(OnboardingRun.objects.needing_a_worker(clock).order_by("pk").values_list("pk", flat=True)[:limit])
    for run_id in run_ids:
        log_event(logger, "requeue", job="onboarding", id=run_id, reason="sweep: pending, released or lease expired")
        transaction.on_commit(partial(_enqueue, run_id))
    return run_ids

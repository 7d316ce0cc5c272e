"""Public API of the onboarding app: start, resume, cancel and sweep runs."""

import logging
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction

from onboarding import queue
from onboarding.errors import RunAlreadyActive
from onboarding.models import OnboardingRun, Supplier
from weave.events import log_event
from weave.leases import Clock, default_clock

logger = logging.getLogger("weave.onboarding")
Status = OnboardingRun.Status


def _enqueue(run_id: int) -> None:
    queue.enqueue_run(run_id)


def onboarding_start(*, supplier: Supplier, started_by: Any = None) -> OnboardingRun:
    """Create a pending run for `supplier` and enqueue it once the transaction commits.

    Raises `RunAlreadyActive` if the supplier already has a pending or running run.
    """
    user = started_by if getattr(started_by, "is_authenticated", False) else None
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
    if run.status not in OnboardingRun.ACTIVE:
        return False
    transaction.on_commit(partial(_enqueue, run.pk))
    return True


def onboarding_cancel(*, run: OnboardingRun, cancelled_by: Any = None, clock: Clock = default_clock) -> bool:
    """Cancel an active run; return False if it had already finished.

    Only the status changes, in one conditional statement. A worker holding the run is refused at
    its next guarded save (which expects status = running) and gives its lease back.
    """
    who = getattr(cancelled_by, "get_username", lambda: "")() or "an operator"
    changed = OnboardingRun.objects.filter(pk=run.pk, status__in=OnboardingRun.ACTIVE).update(
        status=Status.CANCELLED, reason=f"Cancelled by {who}.", finished_at=clock.now()
    )
    if changed:
        log_event(logger, "cancelled", job="onboarding", id=run.pk, reason=f"by {who}")
    return changed == 1


def onboarding_wake() -> None:
    """Ask for an attempt at every run that needs a worker now (the due-time watcher's wake-up)."""
    onboarding_sweep()


def onboarding_sweep(*, clock: Clock = default_clock, limit: int = 500) -> list[int]:
    """Enqueue every active run nobody holds under a live lease (pending, released or crashed); return their ids.

    Enqueueing a run twice is harmless: the second task finds it busy or finished and ends quietly.
    """
    run_ids = list(OnboardingRun.objects.needing_a_worker(clock).order_by("pk").values_list("pk", flat=True)[:limit])
    for run_id in run_ids:
        log_event(logger, "requeue", job="onboarding", id=run_id, reason="sweep: pending, released or lease expired")
        transaction.on_commit(partial(_enqueue, run_id))
    return run_ids

"""The story of one onboarding run: its claims, steps, attempt endings, what people did and who holds it now."""

import re

from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from weave.leases import Clock, default_clock
from weave.operations import (
    OperatorEvent,
    Timeline,
    add_operator_events,
    clock_time,
    fences_accounted,
    holder,
    lateness,
    said_once,
)

_FENCE = re.compile(r"\bfence (\d+)")


def explain_run(pk: int, *, clock: Clock = default_clock) -> Timeline:
    """Return the timeline of onboarding run `pk`, ending with a plain-language summary."""
    run = OnboardingRun.objects.select_related("supplier").with_lease_state(clock).get(pk=pk)
    attempts = list(RunAttempt.objects.filter(run_id=pk).order_by("fence", "pk"))
    receipts = list(StepReceipt.objects.filter(run_id=pk).order_by("completed_at", "pk"))
    t = Timeline(f"Onboarding run {run.pk} for {run.supplier.legal_name}: {run.status}, last step {run.phase or '—'}")
    t.add(run.created_at, "created", f"by {run.created_by or 'nobody recorded'}")
    due = None  # the due time the next claim is measured against
    for a in attempts:
        t.add(a.started_at, "claim", f"fence {a.fence} claimed by {a.owner}{lateness(a.started_at, due)}")
        due = None
        if a.outcome != RunAttempt.Outcome.RUNNING:
            t.add(a.ended_at, a.outcome, f"fence {a.fence}: {said_once(a.reason)}".rstrip(": "))
            due = a.retry_due_at
    for r in receipts:
        t.add(r.completed_at, "receipt", f"step {r.step} saved by fence {r.fence} ({r.owner})")
        if r.undone_at is not None:
            t.add(r.undone_at, "undone", f"step {r.step} undone by fence {r.undone_fence} (Cancel and undo)")
    events = add_operator_events(t, OnboardingRun, pk)
    t.add(None, "holder", holder(run))
    t.summary = _summary(run, attempts, receipts) + " " + fences_accounted(run.fence, _fences(attempts, events))
    return t


def _fences(attempts: list[RunAttempt], events: list[OperatorEvent]) -> dict[int, str]:
    """What took each fence: a worker's claim (its attempt), or a person's retry (a re-open bumps the fence)."""
    known = {a.fence: f"claimed by {a.owner} ({a.outcome})" for a in attempts}
    for e in events:
        found = _FENCE.search(e.text)
        if found and e.text.lower().startswith(("re-opened", "retried")):
            known.setdefault(int(found.group(1)), f"re-opened by {e.who}'s retry")
    return known


def current_reason(run: OnboardingRun) -> str:
    """The run's reason, unless its status has moved past it (a running run still saying it waits)."""
    if run.status == OnboardingRun.Status.RUNNING and run.owner:
        live = getattr(run, "lease_live", None)
        state = "" if live is None else (" (lease live)" if live else " (lease expired: its worker stopped)")
        return f"Running under fence {run.fence}, held by {run.owner}{state}; last saved step {run.phase or '—'}."
    return said_once(run.reason)


def _summary(run: OnboardingRun, attempts: list[RunAttempt], receipts: list[StepReceipt]) -> str:
    if not attempts:
        return f"Run {run.pk} has not been claimed yet; it is {run.status}."
    parts = []
    for number, a in enumerate(attempts, 1):
        steps = [r.step for r in receipts if r.fence == a.fence]
        did = f"saved {', '.join(steps)}" if steps else "saved no step"
        reason = said_once(a.reason)
        endings: dict[str, str] = {
            RunAttempt.Outcome.RUNNING: "is still running",
            RunAttempt.Outcome.COMPLETED: f"completed the run at {clock_time(a.ended_at)}",
            RunAttempt.Outcome.BLOCKED: f"lost its lease and was blocked at {clock_time(a.ended_at)} ({reason})",
            RunAttempt.Outcome.CRASHED: f"stopped without a word and was marked crashed at {clock_time(a.ended_at)}",
            RunAttempt.Outcome.RELEASED: f"gave the run back at {clock_time(a.ended_at)} ({reason})",
            RunAttempt.Outcome.FAILED: f"failed the run at {clock_time(a.ended_at)} ({reason})",
        }
        ending = endings.get(a.outcome, a.outcome)
        parts.append(f"attempt {number} (fence {a.fence}) {did} and {ending}")
    text = "; ".join(parts)
    tail = f" Reason on the run: {current_reason(run)}" if run.reason else ""
    return f"{text[0].upper()}{text[1:]}. The run is {run.status} after step {run.phase or '—'}.{tail}"

"""The story of one job of a core-run job type: its attempts, step receipts and who holds it now."""

from collections.abc import Callable
from typing import Any

from weave.leases import Clock, default_clock
from weave.models import JobAttempt, JobStepReceipt
from weave.timeline import Timeline, clock_time


def explain_job(job_type: str, model: Any, pk: Any, *, clock: Clock = default_clock) -> Timeline:
    """Return the timeline of job `pk` of `job_type`, ending with a plain-language summary."""
    job = model.objects.with_lease_state(clock).get(pk=pk)
    attempts = list(JobAttempt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("number", "pk"))
    receipts = list(JobStepReceipt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("finished_at", "pk"))
    t = Timeline(f"{job_type} {pk}: {job.state}, {job.attempts} attempt(s)")
    t.add(job.created_at, "created", f"{job_type} {pk}")
    for a in attempts:
        t.add(a.started_at, "claim", f"attempt {a.number}: fence {a.fence} claimed by {a.owner}")
        t.add(a.finished_at, a.outcome, f"attempt {a.number} (fence {a.fence}): {a.reason}".rstrip(": "))
    for r in receipts:
        t.add(r.finished_at, "receipt", f"step {r.step} saved by fence {r.fence} ({r.owner}), key {r.idempotency_key}")
    if job.owner is None:
        held = f"nobody holds it (fence {job.fence}); state {job.state}"
    else:
        state = "live" if job.lease_live else "expired"
        held = f"{job.owner} at fence {job.fence}, lease {state} until {clock_time(job.lease_expires_at)}"
    t.add(None, "holder", held)
    t.summary = _summary(job, attempts)
    return t


def _summary(job: Any, attempts: list[JobAttempt]) -> str:
    if not attempts:
        return f"Not claimed yet; it is {job.state}."
    last = attempts[-1]
    blocked = sum(1 for a in attempts if a.outcome == JobAttempt.Outcome.BLOCKED)
    lost = f" {blocked} attempt(s) lost their lease and wrote nothing after it." if blocked else ""
    when = (
        f" Next attempt due at {clock_time(job.next_attempt_at)}."
        if job.state == "pending" and job.next_attempt_at
        else ""
    )
    return f"{len(attempts)} attempt(s); the last ended {last.outcome}: {last.reason or 'no reason given'}.{lost}{when}"


def explainer_for(job_type: str, model: Any) -> Callable[[int], Timeline]:
    """The `weave_explain <job_type> <id>` function of a core-run job type."""
    return lambda pk: explain_job(job_type, model, pk)

"""The story of one job of a core-run job type: its attempts, step receipts, what people did and who holds it now."""

from collections.abc import Callable
from typing import Any

from weave.leases import Clock, default_clock
from weave.models import JobAttempt, JobStepReceipt
from weave.timeline import Timeline, add_operator_events, clock_time


def explain_job(job_type: str, model: Any, pk: Any, *, clock: Clock = default_clock) -> Timeline:
    """Return the timeline of job `pk` of `job_type`, ending with a plain-language summary."""
    job = model.objects.with_lease_state(clock).get(pk=pk)
    attempts = list(JobAttempt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("number", "pk"))
    receipts = list(JobStepReceipt.objects.filter(job_type=job_type, job_id=str(pk)).order_by("finished_at", "pk"))
    t = Timeline(f"{job_type} {pk}: {job.state}, {attempt_count(job, attempts)}")
    t.add(job.created_at, "created", f"{job_type} {pk}")
    for a in attempts:
        t.add(a.started_at, "claim", f"attempt {a.number}: fence {a.fence} claimed by {a.owner}")
        t.add(a.finished_at, a.outcome, f"attempt {a.number} (fence {a.fence}): {a.reason}".rstrip(": "))
    for r in receipts:
        t.add(r.finished_at, "receipt", f"step {r.step} saved by fence {r.fence} ({r.owner}), key {r.idempotency_key}")
    add_operator_events(t, model, pk)
    t.add(None, "holder", _holder(job))
    t.summary = _summary(job, attempts)
    return t


def attempt_count(job: Any, ended: list[JobAttempt]) -> str:
    """The attempts so far, said the same way in the title and the summary: "2 attempt(s): 1 ended, 1 running".

    A claim counts an attempt as it starts; its history row is written when it ends. The difference is an
    attempt still running (under a live lease) or one whose worker stopped without ending it.
    """
    started = max(job.attempts, len(ended))
    open_ = started - len(ended)
    if not open_:
        return f"{started} attempt(s)"
    what = "running" if job.owner is not None and job.lease_live else "never ended (its worker stopped)"
    return f"{started} attempt(s): {len(ended)} ended, {open_} {what}"


def _holder(job: Any) -> str:
    if job.owner is None:
        return f"nobody holds it (fence {job.fence}); state {job.state}"
    state = "live" if job.lease_live else "expired"
    return f"{job.owner} at fence {job.fence}, lease {state} until {clock_time(job.lease_expires_at)}"


def _summary(job: Any, attempts: list[JobAttempt]) -> str:
    count = attempt_count(job, attempts)
    running = f" {job.owner} holds it under fence {job.fence} now." if job.owner is not None and job.lease_live else ""
    if not attempts:
        return f"{count}; no attempt has ended yet; it is {job.state}.{running}"
    last = attempts[-1]
    blocked = sum(1 for a in attempts if a.outcome == JobAttempt.Outcome.BLOCKED)
    lost = f" {blocked} attempt(s) lost their lease and wrote nothing after it." if blocked else ""
    when = (
        f" Next attempt due at {clock_time(job.next_attempt_at)}."
        if job.state == "pending" and job.next_attempt_at
        else ""
    )
    ended = f"the last one that ended, attempt {last.number}, ended {last.outcome}"
    reason = last.reason.rstrip(".") or ("" if last.outcome == JobAttempt.Outcome.DONE else "no reason given")
    return f"{count}; {ended}{': ' if reason else ''}{reason}.{lost}{when}{running}"


def explainer_for(job_type: str, model: Any) -> Callable[[int], Timeline]:
    """The `weave_explain <job_type> <id>` function of a core-run job type."""
    return lambda pk: explain_job(job_type, model, pk)

"""Retention: delete finished history older than WEAVE["RETENTION"] says, in short fenced batches.

The core knows no app's tables. Apps register what may be purged in `AppConfig.ready()`:

    register_purge(PurgeSpec(kind="attempts", model=DeliveryAttempt, candidates=..., labels=...))

`purge()` (the scheduled `weave.retention.purge_task`) takes the job's lease (`PurgeState`, guarded by
the database clock), then, kind by kind, deletes at most RETENTION_BATCH rows per transaction. Each
batch's transaction first renews the lease with a guarded UPDATE (owner, fence, not expired): a purge
that lost its lease (paused, cut off, taken over) deletes nothing more. Every batch is complete on its
own, so a purge stopped anywhere resumes where it was at its next run. Batches are picked from the
oldest end, so no statement holds more than one batch's row locks.

A row is picked outside the batch's transaction, so it may change before it is deleted (an operator
retries it, a worker claims it). Inside the transaction the batch is read again through the kind's
whole condition (finished, free, finished before the cutoff), locking each row (PostgreSQL: FOR UPDATE
SKIP LOCKED, a row someone is changing is left for the next run; SQLite: the lease renewal before it
already holds the database's write lock), and only what still passes, with its dependants, is deleted.

Counters stay monotonic: each batch adds what it deleted to `PurgedCount` (per kind and label, e.g. an
attempt's outcome) in the same transaction, and the metrics add those to the rows still stored.
"""

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import models, transaction
from django.db.models import F, Q

from weave.conf import weave_settings
from weave.leases import DbNow, new_owner
from weave.telemetry import db_now

logger = logging.getLogger("weave.retention")

JOB = "weave.retention"
# Days each kind of finished history is kept; None keeps it forever. A site sets WEAVE["RETENTION"] to
# change some of them; the kinds not named keep these defaults.
DEFAULT_RETENTION: Mapping[str, float | None] = {
    "notifications": 30,  # finished notifications (delivered, failed, cancelled, expired), with their attempts
    "attempts": 30,  # delivery attempts of finished notifications, finished this long ago
    "breaker_openings": 90,
    "runs": 180,  # finished onboarding runs, with their attempts and step receipts
    "run_attempts": 180,  # attempts of finished onboarding runs (the run itself may be kept longer)
    "wake_requests": 7,  # wake-up request rows not asked for this long
    "jobs": 30,  # finished rows of a site's own job types (and django.tasks rows), with attempts and receipts
}
BACKLOG_CAP = 100_000  # the backlog is counted up to this many rows per kind (a bounded query)


@dataclass(frozen=True)
class PurgeSpec:
    """One kind of purgeable history.

    `candidates(cutoff)` returns the rows that may be deleted: the whole condition (finished, held by
    nobody, finished before `cutoff` by the database clock), since it is applied again, under lock,
    right before the delete. `labels(rows)` returns {label: count} of those rows for the monotonic
    counters, and `before(rows)` deletes dependants first and returns {kind: {label: count}} of what it
    deleted. `ordering` picks the oldest first (an index on it keeps the pick cheap); `lock_of` names
    the tables whose rows the re-read locks (a dependant's parent too, whose state decides). `period`
    is the WEAVE["RETENTION"] key (default: `kind`).
    """

    kind: str
    model: type[models.Model]
    candidates: Callable[[datetime], "models.QuerySet[Any]"]
    labels: Callable[["models.QuerySet[Any]"], dict[str, int]] | None = None
    before: Callable[["models.QuerySet[Any]"], dict[str, dict[str, int]]] | None = None
    order: int = 100  # lower first: a parent's dependants go before it
    ordering: tuple[str, ...] = ("pk",)
    lock_of: tuple[str, ...] = ("self",)
    period: str = ""


_specs: dict[str, PurgeSpec] = {}


def register_purge(spec: PurgeSpec) -> None:
    _specs[spec.kind] = spec


def registered_purges() -> list[PurgeSpec]:
    specs = {**_job_purges(), **_specs}
    return sorted(specs.values(), key=lambda spec: (spec.order, spec.kind))


def retention() -> dict[str, float | None]:
    """Days kept per kind: DEFAULT_RETENTION with the site's WEAVE["RETENTION"] over it."""
    return {**DEFAULT_RETENTION, **dict(weave_settings.RETENTION or {})}


def retention_problems() -> list[str]:
    """What is wrong with WEAVE["RETENTION"] (for the system check), or nothing."""
    problems = []
    for kind, days in dict(weave_settings.RETENTION or {}).items():
        if kind not in DEFAULT_RETENTION:
            problems.append(f"unknown kind {kind!r} (known: {', '.join(DEFAULT_RETENTION)})")
        elif days is not None and (isinstance(days, bool) or not isinstance(days, (int, float)) or days <= 0):
            problems.append(f"{kind!r} must be a number of days above 0, or None to keep forever; not {days!r}")
    return problems


def cutoff(kind: str, now: datetime) -> datetime | None:
    days = retention().get(kind)
    return None if days is None else now - timedelta(days=float(days))


def _cutoff(spec: PurgeSpec, now: datetime) -> datetime | None:
    return cutoff(spec.period or spec.kind, now)


# --- the fence --------------------------------------------------------------------------------------


class LeaseLost(Exception):
    """The purge's lease expired or was taken over: it stops, and its last batch did not commit."""


def _claim(owner: str, ttl: float) -> int | None:
    """Take the purge lease; return the new fence, or None while another purge holds it."""
    from weave.models import PurgeState

    PurgeState.objects.get_or_create(name=JOB)
    free = Q(owner__isnull=True) | Q(lease_expires_at__lte=DbNow())
    taken = PurgeState.objects.filter(free, name=JOB).update(
        owner=owner, fence=F("fence") + 1, lease_expires_at=DbNow(timedelta(seconds=ttl)), last_started_at=DbNow()
    )
    if not taken:
        return None
    return int(PurgeState.objects.get(name=JOB).fence)


def _renew(owner: str, fence: int, ttl: float, deleted: int = 0) -> None:
    """Guarded renewal inside the batch's transaction; refuses (LeaseLost) unless the lease is still ours."""
    from weave.models import PurgeState

    renewed = PurgeState.objects.filter(name=JOB, owner=owner, fence=fence, lease_expires_at__gt=DbNow()).update(
        lease_expires_at=DbNow(timedelta(seconds=ttl)), deleted=F("deleted") + deleted
    )
    if renewed != 1:
        raise LeaseLost(f"the purge lease (fence {fence}) is no longer {owner}'s")


def _count_deleted(owner: str, fence: int, deleted: int) -> None:
    """Add a batch's deletions to the job's total (same transaction, same guard; the batch renewed it)."""
    from weave.models import PurgeState

    PurgeState.objects.filter(name=JOB, owner=owner, fence=fence).update(deleted=F("deleted") + deleted)


def _release(owner: str, fence: int, outcome: str) -> None:
    from weave.models import PurgeState

    PurgeState.objects.filter(name=JOB, owner=owner, fence=fence).update(
        owner=None, lease_expires_at=None, last_finished_at=DbNow(), last_outcome=outcome
    )


def _count_purged(kind: str, counts: Mapping[str, int]) -> None:
    from weave.models import PurgedCount

    for label, n in counts.items():
        if not n:
            continue
        if not PurgedCount.objects.filter(kind=kind, label=label).update(count=F("count") + n):
            PurgedCount.objects.create(kind=kind, label=label, count=n)


# --- the job ----------------------------------------------------------------------------------------


@dataclass
class PurgeReport:
    owner: str = ""
    fence: int | None = None
    deleted: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    stopped: str = ""  # why it stopped before everything due was deleted ("" when it finished)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def purge(*, batch: int | None = None, budget: float | None = None, owner: str | None = None) -> PurgeReport:
    """Delete expired history, kind by kind, in fenced batches, until done or `budget` seconds are spent."""
    size = int(batch or weave_settings.RETENTION_BATCH)
    seconds = float(budget if budget is not None else weave_settings.RETENTION_BUDGET)
    ttl = float(weave_settings.RETENTION_LEASE_TTL)
    report = PurgeReport(owner=owner or new_owner("purge:"))
    report.fence = _claim(report.owner, ttl)
    if report.fence is None:
        report.stopped = "another purge holds the lease"
        return report
    deadline = time.monotonic() + seconds
    now = db_now()
    try:
        for spec in registered_purges():
            if not _purge_kind(spec, now, size, report, deadline):
                break
    except LeaseLost as lost:
        report.stopped = str(lost)
        logger.warning("event=purge_lease_lost owner=%s reason=%s", report.owner, lost)
        return report
    outcome = report.stopped or "finished"
    _release(report.owner, report.fence, f"{outcome}; deleted {sum(report.deleted.values())} rows")
    logger.info("event=purge owner=%s deleted=%s stopped=%s", report.owner, report.deleted, report.stopped or "-")
    return report


def _purge_kind(spec: PurgeSpec, now: datetime, size: int, report: PurgeReport, deadline: float) -> bool:
    """Delete one kind's expired rows batch by batch; return False once the budget is spent."""
    before = _cutoff(spec, now)
    if before is None:
        return True
    after: tuple[Any, ...] | None = None  # where the last batch ended: rows left behind are not picked again
    while True:
        if time.monotonic() >= deadline:
            report.stopped = "budget spent (the next run resumes)"
            return False
        picked = _pick(spec, before, size, after)
        if not picked:
            return True
        after = picked[-1]
        _delete_batch(spec, before, [row[-1] for row in picked], report)
        report.batches += 1


def _pick(spec: PurgeSpec, before: datetime, size: int, after: tuple[Any, ...] | None) -> list[tuple[Any, ...]]:
    """The next batch's (ordering..., pk) rows, oldest first, past `after`: a row the guard kept (it
    changed since it was picked, or someone holds its lock) is left for the next run, never picked again
    by this one."""
    names = list(dict.fromkeys([*spec.ordering, "pk"]))
    rows = spec.candidates(before).order_by(*names)
    if after is not None:
        rows = rows.filter(_past(names, after))
    return [tuple(row) for row in rows.values_list(*names)[:size]]


def _past(names: list[str], after: tuple[Any, ...]) -> Q:
    """Rows after `after` in `names` order (a keyset, so a batch never rereads the last one)."""
    past = Q()
    for depth, name in enumerate(names):
        equal = dict(zip(names[:depth], after[:depth], strict=True))
        past |= Q(**equal, **{f"{name}__gt": after[depth]})
    return past


def _delete_batch(spec: PurgeSpec, before: datetime, pks: list[Any], report: PurgeReport) -> None:
    """In one transaction: renew the lease, lock and re-check the picked rows, delete what still passes."""
    assert report.fence is not None
    with transaction.atomic():
        # First, and a write: on SQLite it takes the database's write lock, so nothing changes under the batch.
        _renew(report.owner, report.fence, float(weave_settings.RETENTION_LEASE_TTL), 0)
        kept = _lock_still_due(spec, before, pks)
        if not kept:
            return
        rows = spec.model._default_manager.filter(pk__in=kept)
        dependants = spec.before(rows) if spec.before else {}
        counted = spec.labels(rows) if spec.labels else {"": len(kept)}
        deleted = sum(counted.values())
        for kind, counts in dependants.items():
            _count_purged(kind, counts)
            if n := sum(counts.values()):
                report.deleted[kind] = report.deleted.get(kind, 0) + n
                deleted += n
        _count_purged(spec.kind, counted)
        rows.delete()  # locked and re-checked; the dependants are gone, so the cascade finds nothing to collect
        _count_deleted(report.owner, report.fence, deleted)
    report.deleted[spec.kind] = report.deleted.get(spec.kind, 0) + sum(counted.values())


def _lock_still_due(spec: PurgeSpec, before: datetime, pks: list[Any]) -> list[Any]:
    """Those of `pks` that still meet the kind's whole condition, each locked with the rows `lock_of` names
    (a row someone else has locked is skipped: it is changing, and is judged again at the next run)."""
    guarded = spec.candidates(before).filter(pk__in=pks).order_by()
    related = [name for name in spec.lock_of if name != "self"]
    if not related:
        return list(guarded.select_for_update(skip_locked=True).values_list("pk", flat=True))
    # FOR UPDATE OF a parent needs the parent in the query: read it along, keep only the keys.
    locked = guarded.select_related(*related).select_for_update(skip_locked=True, of=spec.lock_of)
    only = [spec.model._meta.pk.name, *(f"{name}__{_pk_name(spec.model, name)}" for name in related)]
    return [row.pk for row in locked.only(*only)]


def _pk_name(model: type[models.Model], relation: str) -> str:
    related = model._meta.get_field(relation).related_model
    assert related is not None and not isinstance(related, str)
    return related._meta.pk.name


def purge_task() -> dict[str, Any]:
    """The scheduled django-q2 entry point (WEAVE RETENTION_EVERY minutes)."""
    return purge().as_dict()


# --- what the dashboard and the metrics read ----------------------------------------------------------


def purged_totals(kind: str) -> dict[str, int]:
    """{label: rows deleted so far} of `kind` (add them to the stored rows for a monotonic counter)."""
    from weave.models import PurgedCount

    return dict(PurgedCount.objects.filter(kind=kind).values_list("label", "count"))


def backlog() -> dict[str, dict[str, Any]]:
    """Per kind: days kept and rows due for deletion now (counted up to BACKLOG_CAP), for dashboard/metrics."""
    now = db_now()
    result: dict[str, dict[str, Any]] = {}
    for spec in registered_purges():
        before = _cutoff(spec, now)
        due = 0 if before is None else spec.candidates(before).order_by()[:BACKLOG_CAP].count()
        result[spec.kind] = {
            "days": retention().get(spec.period or spec.kind),
            "due": due,
            "capped": due >= BACKLOG_CAP,
            "purged": sum(purged_totals(spec.kind).values()),
        }
    return result


def progress() -> dict[str, Any]:
    """The purge job's state: who holds it, rows deleted by every purge, when it last ran and how."""
    from weave.models import PurgeState

    state = PurgeState.objects.filter(name=JOB).first()
    if state is None:
        return {"running": False, "deleted": 0, "last_started_at": None, "last_finished_at": None, "last_outcome": ""}
    return {
        "running": state.owner is not None,
        "owner": state.owner,
        "deleted": state.deleted,
        "last_started_at": state.last_started_at,
        "last_finished_at": state.last_finished_at,
        "last_outcome": state.last_outcome,
    }


def register_core_purges() -> None:
    """Weave's own rows: wake-up requests not asked for within the period (per-job rows never started)."""
    from weave.models import WakeRequest

    register_purge(
        PurgeSpec(
            kind="wake_requests",
            model=WakeRequest,
            order=90,
            candidates=lambda before: WakeRequest.objects.filter(queued_until__lt=before),
        )
    )


# --- a site's own job types (and django.tasks rows) ------------------------------------------------------

JOB_FINISHED = ("done", "failed", "cancelled")


def _job_purges() -> dict[str, PurgeSpec]:
    """One purge per declared job type on a `JobModel`: rows finished before the cutoff and free, with
    their attempts and step receipts (`JobAttempt`, `JobStepReceipt`, kept exactly as long as their row)."""
    from weave.jobs.declaration import job_types
    from weave.models import JobModel

    specs = {}
    for job in job_types():
        if not issubclass(job.model, JobModel):
            continue
        kind = f"jobs:{job.name}"
        specs[kind] = PurgeSpec(
            kind=kind,
            period="jobs",
            model=job.model,
            order=60,
            ordering=("finished_at",),
            candidates=_finished_jobs(job.model),
            before=_job_dependants(job.name),
        )
    return specs


def _finished_jobs(model: type[models.Model]) -> Callable[[datetime], "models.QuerySet[Any]"]:
    def candidates(before: datetime) -> "models.QuerySet[Any]":
        rows = model._default_manager.filter(state__in=JOB_FINISHED, owner__isnull=True)
        rows = rows.filter(finished_at__isnull=False, finished_at__lt=before)
        # A row the site's own records point to is their provenance: kept (and never cascaded into them).
        for relation in model._meta.related_objects:
            if relation.many_to_many or relation.remote_field is None:
                continue
            column = relation.field.attname
            pointing = relation.related_model._default_manager.filter(**{f"{column}__isnull": False})
            rows = rows.exclude(pk__in=pointing.values(column))
        return rows

    return candidates


def _job_dependants(job_type: str) -> Callable[["models.QuerySet[Any]"], dict[str, dict[str, int]]]:
    def before(rows: "models.QuerySet[Any]") -> dict[str, dict[str, int]]:
        from weave.models import JobAttempt, JobStepReceipt

        ids = [str(pk) for pk in rows.values_list("pk", flat=True)]
        attempts = JobAttempt.objects.filter(job_type=job_type, job_id__in=ids)
        receipts = JobStepReceipt.objects.filter(job_type=job_type, job_id__in=ids)
        counts = {"job_attempts": {"": attempts.count()}, "job_receipts": {"": receipts.count()}}
        attempts._raw_delete(attempts.db)  # nothing refers to them
        receipts._raw_delete(receipts.db)
        return counts

    return before

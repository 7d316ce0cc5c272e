"""Bench-only: Weave's delivery path with the guard conditions removed. Never used in production code.

It exists to price the guards (issue 6, "cost of fencing"). The notifications worker runs unchanged;
for the length of one drain, the lease queryset's guarded writes lose their guard:

- `guarded_update` (and so `release`) becomes `UPDATE ... WHERE pk = %s`, without `owner = me AND
  fence = my_fence AND lease_expires_at > db_now()` and also without its `expect` filter (more than the
  fence; the delivery path does not call it), and never reports a loss;
- `renew_batch` and `release_batch` become `UPDATE ... WHERE pk IN (...)` (and `renew_batch` never makes
  its follow-up SELECT for rows found lost);
- `release_each` (the group finish) keeps its one statement, but `FinishPlan.guard` matches rows by
  pk only, without each row's owner, fence and live-expiry guard.

The claim stays as it is, so rows are still split between workers and the provider sees the same
traffic. The patch lives only inside `drain()` below, in the django-q2 worker process that runs it
(a worker runs one task at a time), and is undone when the drain ends.
"""

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from weave.leases import BatchLease, Lease, LeaseQuerySet, default_clock
from weave.leases.bulk import FinishPlan


def _seconds(ttl: float | timedelta) -> timedelta:
    return ttl if isinstance(ttl, timedelta) else timedelta(seconds=ttl)


def _unguarded_update(
    self: LeaseQuerySet, lease: Lease, *, clock=default_clock, expect: Mapping[str, Any] | None = None, **fields: Any
) -> None:
    self.filter(pk=lease.pk).update(**fields)


def _unguarded_renew_batch(self: LeaseQuerySet, batch: BatchLease, *, ttl, clock=default_clock) -> list[Any]:
    if batch.fences:
        self.filter(pk__in=list(batch.fences)).update(lease_expires_at=clock.now(_seconds(ttl)))
    return []


def _unguarded_finish_guard(self: FinishPlan, qn, now):
    # The group finish keeps its statement; only its WHERE clause loses the owner, fence and expiry.
    pk = qn(self.keys[0].field.column)
    return f"n.{pk} = v._w_pk", []


def _unguarded_release_batch(
    self: LeaseQuerySet, batch: BatchLease, pks: Iterable[Any] | None = None, *, clock=default_clock, **fields: Any
) -> int:
    wanted = [pk for pk in (batch.fences if pks is None else pks) if pk in batch.fences]
    if not wanted:
        return 0
    released = self.filter(pk__in=wanted).update(owner=None, lease_expires_at=None, **fields)
    for pk in wanted:
        batch.drop(pk)
    return released


@contextmanager
def guards_removed() -> Iterator[None]:
    """Swap the lease queryset's guarded writes for unguarded ones, then put them back."""
    names = ("guarded_update", "renew_batch", "release_batch")
    saved = {name: getattr(LeaseQuerySet, name) for name in names}
    saved_guard = FinishPlan.guard
    LeaseQuerySet.guarded_update = _unguarded_update
    LeaseQuerySet.renew_batch = _unguarded_renew_batch
    LeaseQuerySet.release_batch = _unguarded_release_batch
    FinishPlan.guard = _unguarded_finish_guard
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(LeaseQuerySet, name, method)
        FinishPlan.guard = saved_guard


def drain() -> dict[str, Any]:
    """The django-q2 entry point of the unfenced variant (bench only)."""
    from notifications.delivery import drain as run_drain

    with guards_removed():
        return run_drain(enqueue_more=False).as_dict()

"""`LeaseQuerySet`: the only code that writes lease fields (DESIGN §2).

Every method below is ONE `UPDATE`, whose WHERE clause carries the whole guard, judged by the
database clock. A follow-up `SELECT` only reads back what the update assigned (the new fence), or,
on refusal, who holds the row now so the error can say so.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from functools import reduce
from operator import or_
from typing import Any, Self, TypeVar

from django.db import OperationalError, connections, models, router, transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Q

from weave.leases.binding import statement_cursor
from weave.leases.bulk import finish_sql
from weave.leases.clock import Clock, default_clock
from weave.leases.errors import LeaseBusy, LeaseLost, NotClaimable
from weave.leases.lease import BatchLease, Lease
from weave.leases.returning import ClaimStatement, ReturnedColumns, ReturningUpdate

# SQLSTATE lock_not_available: FOR UPDATE NOWAIT found the row locked by another transaction.
LOCK_NOT_AVAILABLE = "55P03"

_M = TypeVar("_M", bound=models.Model)


def _seconds(ttl: float | timedelta) -> timedelta:
    return ttl if isinstance(ttl, timedelta) else timedelta(seconds=ttl)


class LeaseQuerySet(models.QuerySet[_M, _M]):
    """Claim, renew, guarded update and release, each a single guarded statement."""

    _db: str | None  # Django's alias hint for this queryset (not in django-stubs); None means "ask the router"

    # --- states -------------------------------------------------------------------------------

    def free_or_expired(self, clock: Clock = default_clock) -> Self:
        """Rows nobody holds, or whose holder's lease ran out by the database clock."""
        return self.filter(Q(owner__isnull=True) | Q(lease_expires_at__lte=clock.now()))

    def settle_free(self, *, clock: Clock = default_clock, **fields: Any) -> int:
        """Write `fields` to those rows nobody holds under a live lease, clearing a lapsed lease; return how many.

        One UPDATE whose WHERE is the claim's condition: a row under a live lease matches nothing and stays
        its holder's. A lapsed holder's name and expiry go in the same statement (the fence stays, so the
        holder's own guarded writes match nothing if it wakes up), and no settled row keeps a dead owner."""
        return self.free_or_expired(clock).update(owner=None, lease_expires_at=None, **fields)

    def live(self, clock: Clock = default_clock) -> Self:
        """Rows held under a lease that is still live by the database clock."""
        return self.filter(owner__isnull=False, lease_expires_at__gt=clock.now())

    def held_by(self, lease: Lease, clock: Clock = default_clock) -> Self:
        """The row, only while `lease` still holds it: same owner, same fence, not expired."""
        return self.filter(pk=lease.pk, owner=lease.owner, fence=lease.fence, lease_expires_at__gt=clock.now())

    def with_lease_state(self, clock: Clock = default_clock) -> Self:
        """Annotate `lease_live`: whether someone holds the row under a lease live by the database clock."""
        live = ExpressionWrapper(Q(owner__isnull=False, lease_expires_at__gt=clock.now()), output_field=BooleanField())
        return self.annotate(lease_live=live)

    # --- claims -------------------------------------------------------------------------------

    def claim(
        self,
        pk: Any,
        *,
        owner: str,
        ttl: float | timedelta,
        clock: Clock = default_clock,
        also: Mapping[str, Any] | None = None,
    ) -> Lease:
        """Claim one row if it is free or expired (and matches this queryset); bump its fence.

        `also` writes other fields in the same statement (e.g. an attempt counter). Raises `LeaseBusy`
        if someone else holds a live lease, `NotClaimable` otherwise.
        """
        # nowait: a row locked by another transaction (a save in flight, or a worker cut off before its
        # COMMIT) refuses at once instead of queueing behind the lock. Picking the row in the subselect
        # locks it before the outer UPDATE computes its SET clause, so the expiry's db_now() is read
        # while we hold the row: a claim can never land with an expiry measured before a wait.
        # of=self: only the leased row is locked, never rows of tables the queryset's filters join.
        chosen = self.filter(pk=pk).free_or_expired(clock).select_for_update(nowait=True, of=("self",)).values("pk")
        try:
            # A savepoint when nested, so a refusal leaves the caller's transaction usable.
            with transaction.atomic(using=self._write_db):
                claimed = (
                    self._fresh()
                    .filter(pk__in=chosen)
                    .free_or_expired(clock)
                    ._update_returning(
                        ["fence", "lease_expires_at"],
                        **(also or {}),
                        owner=owner,
                        fence=F("fence") + 1,
                        lease_expires_at=clock.now(_seconds(ttl)),
                    )
                )
        except OperationalError as error:
            if getattr(error.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            raise self._locked_refusal(pk, clock) from error
        if not claimed:
            raise self._claim_refusal(pk, clock)
        ((row),) = claimed
        return Lease(pk=pk, owner=owner, fence=row["fence"], expires_at=row["lease_expires_at"])

    def claim_batch(
        self, *, owner: str, ttl: float | timedelta, limit: int, clock: Clock = default_clock
    ) -> BatchLease:
        """Claim up to `limit` free or expired rows of this queryset (in its order) under one owner."""
        batch, _ = self.claim_rows(owner=owner, ttl=ttl, limit=limit, fields=(), clock=clock)
        return batch

    def claim_rows(
        self,
        *,
        owner: str,
        ttl: float | timedelta,
        limit: int,
        fields: Iterable[str],
        clock: Clock = default_clock,
        also: Mapping[str, Any] | None = None,
    ) -> tuple[BatchLease, list[dict[str, Any]]]:
        """Claim up to `limit` free or expired rows and return the claimed rows' `fields` too: one statement.

        `also` writes other fields in the same statement (e.g. an attempt counter), as with `claim()`;
        the `fields` returned are the values after the claim.

        One `UPDATE ... WHERE pk IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING ...` on
        PostgreSQL: skip_locked lets concurrent claimers pass each other's rows instead of waiting or
        sharing, and passes at once over rows a cut-off worker's open transaction still locks. The rows
        are locked by the subselect before the SET clause runs, so each expiry counts from the lock. On
        SQLite, which serialises writers, the same statement is atomic. Outside a transaction the statement
        commits by itself; inside one it runs in a savepoint.

        Rows come back in this queryset's order as far as the database keeps it in `RETURNING`, which
        it does not promise: callers that care sort them.
        """
        return self.claim_statement(owner=owner, ttl=ttl, limit=limit, fields=fields, clock=clock, also=also).run()

    def claim_statement(
        self,
        *,
        owner: str,
        ttl: float | timedelta,
        limit: int,
        fields: Iterable[str],
        clock: Clock = default_clock,
        also: Mapping[str, Any] | None = None,
    ) -> ClaimStatement:
        """`claim_rows` kept for running again: each `run()` is that claim, compiled once (see `ClaimStatement`)."""
        names = list(fields)

        def build() -> ReturningUpdate:
            chosen = self.free_or_expired(clock).select_for_update(skip_locked=True)[:limit].values("pk")
            claiming = self._fresh().filter(pk__in=chosen).free_or_expired(clock)
            values = {
                **(also or {}),
                "owner": owner,
                "fence": F("fence") + 1,
                "lease_expires_at": clock.now(_seconds(ttl)),
            }
            return ReturningUpdate(claiming, ["pk", "fence", "lease_expires_at", *names], values, using=self._write_db)

        return ClaimStatement(build, owner=owner, fields=names, constant=clock.constant_sql)

    def reopen(self, pk: Any, *, clock: Clock = default_clock, **fields: Any) -> int:
        """Start a new epoch on a free row of this queryset: bump its fence, leave it unowned, write `fields`.

        One statement, like a claim, but nobody holds the row afterwards: the next worker's claim
        takes it at a fence above every lease granted before, so nothing from an earlier epoch can
        land. Return the new fence. Raises `LeaseBusy` if a live lease holds the row, `NotClaimable`
        if it does not match this queryset (e.g. it is not in the state being re-opened).
        """
        reopened = (
            self.filter(pk=pk)
            .free_or_expired(clock)
            ._update_returning(["fence"], owner=None, fence=F("fence") + 1, lease_expires_at=None, **fields)
        )
        if not reopened:
            raise self._claim_refusal(pk, clock)
        ((row),) = reopened
        return int(row["fence"])

    # --- deletes ------------------------------------------------------------------------------

    def lock_free(self, clock: Clock = default_clock) -> list[Any]:
        """Lock the rows of this queryset nobody holds under a live lease; return their pks.

        The lease test and the lock are one UPDATE (writing nothing new), judged by the database clock. Call
        it inside a transaction: until that transaction ends, no claim can take the rows it returned. A row
        held under a live lease is neither locked nor returned.
        """
        pks = list(self.values_list("pk", flat=True))
        if not pks:
            return []
        rows = self._fresh().filter(pk__in=pks).free_or_expired(clock)._update_returning(["pk"], fence=F("fence"))
        return [row["pk"] for row in rows]

    def delete_free(self, clock: Clock = default_clock) -> list[Any]:
        """Delete the rows of this queryset nobody holds under a live lease; return the pks deleted.

        A row deleted under a live lease leaves its worker writing to nothing (its attempt ends `blocked`,
        "the row is gone"), so such rows are kept. The rest are locked by `lock_free` and deleted in the same
        transaction, with Django's cascades and signals: no claim lands between the test and the delete.
        """
        with transaction.atomic(using=self._write_db):
            pks = self.lock_free(clock)
            if pks:
                self._fresh().filter(pk__in=pks).delete()
        return pks

    # --- writes under a lease -------------------------------------------------------------------

    def guarded_update(
        self, lease: Lease, *, clock: Clock = default_clock, expect: Mapping[str, Any] | None = None, **fields: Any
    ) -> None:
        """Write `fields` only while `lease` holds the row (and the row matches `expect`, e.g. a phase).

        Raises `LeaseLost` when no row matched; then nothing was written.
        """
        changed = self.held_by(lease, clock).filter(**(expect or {})).update(**fields)
        if changed != 1:
            raise self._lost(lease, clock, expect, action="write")

    def renew(self, lease: Lease, *, ttl: float | timedelta, clock: Clock = default_clock) -> None:
        """Push the expiry to db_now() + ttl, only while the lease is still live. A lapsed lease stays lapsed."""
        changed = self.held_by(lease, clock).update(lease_expires_at=clock.now(_seconds(ttl)))
        if changed != 1:
            raise self._lost(lease, clock, None, action="renewal")

    def release(
        self, lease: Lease, *, clock: Clock = default_clock, expect: Mapping[str, Any] | None = None, **fields: Any
    ) -> None:
        """Give the row up (owner and expiry cleared, fence kept), writing `fields` in the same statement."""
        self.guarded_update(lease, clock=clock, expect=expect, owner=None, lease_expires_at=None, **fields)

    def release_returning(
        self,
        lease: Lease,
        returning: Sequence[str],
        *,
        clock: Clock = default_clock,
        expect: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """`release`, returning the row's `returning` fields as its one statement stored them.

        A time written as a clock expression (a due time: now + a delay) is read back from the finish
        itself, so a record written next can carry that very time. Raises `LeaseLost` as `release` does.
        """
        held = self.held_by(lease, clock).filter(**(expect or {}))
        stored = held._update_returning(list(returning), owner=None, lease_expires_at=None, **fields)
        if len(stored) != 1:
            raise self._lost(lease, clock, expect, action="write")
        return stored[0]

    def release_each(
        self,
        rows: Iterable[tuple[Lease, Mapping[str, Any]]],
        *,
        clock: Clock = default_clock,
        expect: Mapping[str, Any] | None = None,
    ) -> set[Any]:
        """Release many rows, each under its own lease (owner, fence, live expiry), each with its own fields.

        ONE `UPDATE ... FROM (VALUES ...)`: the same guard as `release()`, row by row, in one statement
        the ORM need not compile. Field values are constants or clock expressions; `expect` adds
        conditions every row must meet (field = constant, e.g. a state). Return the pks that landed;
        the others were not touched (`refusal(lease)` says why, unless only `expect` refused them).
        """
        return set(self.release_each_returning(rows, (), clock=clock, expect=expect))

    def release_each_returning(
        self,
        rows: Iterable[tuple[Lease, Mapping[str, Any]]],
        returning: Sequence[str],
        *,
        clock: Clock = default_clock,
        expect: Mapping[str, Any] | None = None,
    ) -> dict[Any, dict[str, Any]]:
        """`release_each`, returning for each pk that landed its `returning` fields as the statement stored them.

        The same one statement. A time written as a clock expression (a due time: now + a delay) is read
        back from it, so a record written next can carry that very time instead of reading the clock again.
        """
        landed, connection = self._finish_each(rows, clock, expect, returning)
        columns = ReturnedColumns(self.model, ["pk", *returning], connection)
        return {row.pop("pk"): row for row in columns.read(landed, connection)}

    def _finish_each(
        self,
        rows: Iterable[tuple[Lease, Mapping[str, Any]]],
        clock: Clock,
        expect: Mapping[str, Any] | None,
        returning: Sequence[str],
    ) -> tuple[list[Any], Any]:
        """Run the one guarded finish of `rows`; return the raw rows it returned and the connection it ran on."""
        rows = list(rows)
        connection = connections[self._write_db]
        if not rows:
            return [], connection
        statement = finish_sql(self.model, connection, self._write_db, rows, clock, expect=expect, returning=returning)
        # Server-bound where the arrays form allows: no quoting of a group's arrays on the client
        # (weave.leases.binding).
        with statement_cursor(connection, server_bound=statement.server_bound) as cursor:
            cursor.execute(statement.sql, statement.params)
            return cursor.fetchall(), connection

    def refusal(self, lease: Lease, *, clock: Clock = default_clock) -> LeaseLost:
        """Return the `LeaseLost` a write under `lease` gets now: who holds the row instead, and since when."""
        return self._lost(lease, clock, None, action="write")

    # --- batches ---------------------------------------------------------------------------------

    def renew_batch(self, batch: BatchLease, *, ttl: float | timedelta, clock: Clock = default_clock) -> list[Any]:
        """Renew every row of `batch` still ours in one statement; drop and return the rows found lost."""
        if not batch.fences:
            return []
        guard = self._batch_guard(batch.owner, batch.fences, clock)
        changed = self.filter(guard).update(lease_expires_at=clock.now(_seconds(ttl)))
        if changed == len(batch.fences):
            return []
        still_ours = set(self._fresh().filter(guard).values_list("pk", flat=True))
        lost = [pk for pk in batch.fences if pk not in still_ours]
        for pk in lost:
            batch.drop(pk)
        return lost

    def release_batch(
        self, batch: BatchLease, pks: Iterable[Any] | None = None, *, clock: Clock = default_clock, **fields: Any
    ) -> int:
        """Release `pks` (default: all rows of `batch`) in one guarded statement; return how many were ours."""
        wanted = {pk: batch.fences[pk] for pk in (batch.fences if pks is None else pks) if pk in batch.fences}
        if not wanted:
            return 0
        released = self.filter(self._batch_guard(batch.owner, wanted, clock)).update(
            owner=None, lease_expires_at=None, **fields
        )
        for pk in wanted:
            batch.drop(pk)
        return released

    # --- internals ------------------------------------------------------------------------------

    @property
    def _write_db(self) -> str:
        return self._db or router.db_for_write(self.model)

    def _update_returning(self, names: list[str], **values: Any) -> list[dict[str, Any]]:
        """Run this queryset's UPDATE with `RETURNING` the columns of `names` (see `ReturningUpdate`)."""
        return ReturningUpdate(self, names, values, using=self._write_db).run()

    def _fresh(self) -> Self:
        return type(self)(model=self.model, using=self._db)

    def _batch_guard(self, owner: str, fences: Mapping[Any, int], clock: Clock) -> Q:
        by_fence: dict[int, list[Any]] = defaultdict(list)
        for pk, fence in fences.items():
            by_fence[fence].append(pk)
        # Same owner AND each row's own fence: an owner name alone is luck, not a guard.
        rows = reduce(or_, (Q(fence=fence, pk__in=pks) for fence, pks in by_fence.items()))
        return rows & Q(owner=owner, lease_expires_at__gt=clock.now())

    def _label(self, pk: Any) -> str:
        return f"{self.model._meta.label} {pk}"

    def _current(self, pk: Any, clock: Clock) -> dict[str, Any] | None:
        return self._fresh().filter(pk=pk).with_lease_state(clock).values().first()

    def _claim_refusal(self, pk: Any, clock: Clock) -> Exception:
        row = self._current(pk, clock)
        if row is None:
            return NotClaimable(f"{self._label(pk)} does not exist.")
        if row["lease_live"]:
            return LeaseBusy(
                f"{self._label(pk)} is busy: {row['owner']} holds it at fence {row['fence']} "
                f"until {row['lease_expires_at']:%Y-%m-%d %H:%M:%S.%f} (database time)."
            )
        return NotClaimable(f"{self._label(pk)} is free but not in a claimable state.")

    def _locked_refusal(self, pk: Any, clock: Clock) -> LeaseBusy:
        row = self._current(pk, clock)
        held = ""
        if row is not None and row["owner"] is not None:
            state = "live" if row["lease_live"] else "expired"
            held = f"; its lease ({row['owner']} at fence {row['fence']}) is {state}"
        return LeaseBusy(
            f"{self._label(pk)} is busy: its row is locked by another transaction (a write in flight, or a "
            f"worker cut off before its COMMIT, which the server aborts after its session timeouts){held}."
        )

    def _lost(self, lease: Lease, clock: Clock, expect: Mapping[str, Any] | None, *, action: str) -> LeaseLost:
        ours = f"{lease.owner} at fence {lease.fence}"
        row = self._current(lease.pk, clock)
        if row is None:
            label = self._label(lease.pk)
            return LeaseLost(f"Lease lost on {label} ({action} by {ours} refused): the row is gone.", row_gone=True)
        holder, fence = row["owner"], row["fence"]
        names_holder = False
        if row["lease_live"] and (holder, fence) != (lease.owner, lease.fence):
            why, names_holder = f"now held by {holder} at fence {fence}", True
        elif (holder, fence) == (lease.owner, lease.fence) and not row["lease_live"]:
            why = f"our lease expired at {row['lease_expires_at']:%Y-%m-%d %H:%M:%S.%f} (database time)"
        elif holder is None and fence != lease.fence:
            why = f"fence {fence} took the row over and has since released or finished it"
        elif holder is None:
            why = f"the row was released or finished (fence still {fence})"
        elif expect and any(row.get(k) != v for k, v in expect.items()):
            found = ", ".join(f"{k}={row.get(k)!r} (expected {v!r})" for k, v in expect.items())
            why = f"the row moved on: {found}"
        else:
            why, names_holder = f"{holder} at fence {fence} took it and its lease has since expired", True
        return LeaseLost(
            f"Lease lost on {self._label(lease.pk)} ({action} by {ours} refused): {why}.",
            holder=holder,
            holder_fence=fence,
            names_holder=names_holder,
        )

"""The push worker: claim -> send -> guarded finish, with the send slots kept full.

    report = drain()                      # what the django-q2 task runs
    report = deliver_batch(clock=clock)   # one claim only; tests inject a FakeClock, backends and hooks

One thread: every database statement runs on the calling thread (one connection, so a test's
transaction sees it all, and a worker never holds more than one connection), and the same thread
steps the `AsyncSender`'s event loop between statements, up to `concurrency` sends in flight. It

1. claims `batch_size` due rows whenever no more than `concurrency` rows are left to it, so a buffer of
   claimed rows is always ready and no batch waits for its slowest send (one lease per claim; the
   claim returns the rows, no second SELECT);
2. starts a row whenever a slot is free, after the budget, breaker and lease checks;
3. finishes the answers that arrived together in one transaction: ONE guarded `UPDATE ... FROM
   (VALUES ...)` for all their rows (each under its own owner, fence and live expiry), then ONE
   multi-row INSERT of their attempts. If that transaction fails for any reason but the guard (which
   refuses rows without failing), the group is finished again row by row, and a row whose own finish
   still fails is recorded with a sanitized reason: its attempt count always grows.
"""

import logging
import random
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from django.db import DatabaseError, transaction

from notifications import queue
from notifications.backends import PushBackend, PushMessage, SendResult, backend_aliases, get_backend
from notifications.delivery import policy
from notifications.delivery.policy import CircuitBreaker, PastAttempt, RetryPolicy, Transition
from notifications.delivery.receipts import Receipt, insert_receipts
from notifications.delivery.sender import AsyncSender, build_result_missing
from notifications.devices import (
    Unsendable,
    deactivate_device,
    device_for_token,
    fail_queued_for_device,
    inactive_devices,
    touch_devices,
    unsendable,
)
from notifications.models import BreakerOpening, DeliveryAttempt, Notification
from notifications.signals import announce_notifications
from weave.conf import weave_settings
from weave.events import log_event
from weave.leases import BatchLease, Clock, Lease, default_clock, new_owner
from weave.sanitize import outside_text

logger = logging.getLogger("weave.notifications")
JOB = "notification"

_BASE_FIELDS = (
    "device_token", "title", "body", "data", "options", "idempotency_key", "attempts", "backend", "next_attempt_at"
)  # fmt: skip
# Read when the model has them (issue 11 adds expiry, priority and collapse to notifications).
_OPTIONAL_FIELDS = ("collapse_key", "priority", "expires_at", "device")
# If nothing was due, look again this often (real time) while sends are still out, so a drain picks
# up rows created meanwhile instead of ending with them queued.
_RECHECK_SECONDS = 0.25


def _row_fields() -> tuple[str, ...]:
    present = {f.name for f in Notification._meta.get_fields()}
    return _BASE_FIELDS + tuple(name for name in _OPTIONAL_FIELDS if name in present)


@dataclass
class DeliveryReport:
    """What one drain (or one batch) did, for logs, tasks and tests."""

    owner: str
    batches: int = 0
    claimed: int = 0
    sent: int = 0
    delivered: int = 0
    temporary: int = 0
    permanent: int = 0
    unknown: int = 0
    lease_lost: int = 0
    failed: int = 0  # rows that became `failed` (permanent, out of attempts, or their device deactivated)
    expired: int = 0  # rows past their expires_at: ended `expired`, never sent
    pruned: int = 0  # devices deactivated because the provider called their token dead
    skipped: int = 0  # rows found lost before they were sent
    released: int = 0  # unstarted rows handed back (budget spent or breaker open)
    groups: int = 0  # answers finished together in one transaction (one guarded UPDATE + one INSERT)
    fallbacks: int = 0  # groups whose one-statement finish failed and were finished row by row
    budget_spent: bool = False
    breaker: str = ""  # why the circuit breaker opened, if it did
    more_enqueued: bool = False

    def add(self, other: "DeliveryReport") -> None:
        for name in ("batches", "claimed", "sent", "delivered", "temporary", "permanent", "unknown"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("lease_lost", "failed", "expired", "pruned", "skipped", "released", "groups", "fallbacks"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.budget_spent = self.budget_spent or other.budget_spent
        self.breaker = self.breaker or other.breaker

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Hooks:
    """Test seams, called on the worker's own thread (the one with the database connection)."""

    # Right before a row is handed to the sender (after the budget and lease checks).
    before_send: Any = None
    # Right before a group of answers is finished, with their primary keys.
    before_finish: Any = None


@dataclass
class _Claim:
    """One claim statement's rows: one lease (owner, a fence per row), one expiry to keep alive."""

    batch: BatchLease
    deadline: float  # local estimate of the lease's expiry (clock.monotonic scale)
    database_at: datetime | None  # the database's time at the claim ...
    local_at: float  # ... and ours at the same moment, to date sends without a query
    open: int = 0  # rows not yet finished, released or skipped
    counts: Counter[str] = field(default_factory=Counter)
    inactive: dict[Any, str] = field(default_factory=dict)  # the claim's devices found inactive: id -> reason


@dataclass
class _Row:
    pk: Any
    claim: _Claim
    fence: int
    attempts: int  # the row's attempts when claimed; only our lease can change it meanwhile
    message: PushMessage
    sent_at: datetime | None = None
    device_id: Any = None

    @property
    def lease(self) -> Lease:
        return Lease(pk=self.pk, owner=self.claim.batch.owner, fence=self.fence)


@dataclass
class _Plan:
    row: _Row
    result: SendResult
    transition: Transition


class PushWorker:
    """One worker's drain: claim rows under one owner and deliver them within a time budget."""

    def __init__(
        self,
        *,
        clock: Clock = default_clock,
        owner: str | None = None,
        hooks: Hooks | None = None,
        batch_size: int | None = None,
        concurrency: int | None = None,
        budget: float | None = None,
        ttl: float | None = None,
        rng: random.Random | None = None,
        backends: Mapping[str, PushBackend] | None = None,
    ) -> None:
        conf = weave_settings
        self.clock = clock
        self.owner = owner or new_owner("push:")
        self.hooks = hooks or Hooks()
        self.batch_size = batch_size or conf.PUSH_BATCH_SIZE
        self.concurrency = max(1, concurrency or conf.PUSH_CONCURRENCY)
        self.budget = conf.PUSH_BUDGET if budget is None else budget
        self.ttl = float(ttl or conf.PUSH_LEASE_TTL)
        self.policy = RetryPolicy(
            max_attempts=conf.PUSH_MAX_ATTEMPTS, backoff_base=conf.PUSH_BACKOFF_BASE, backoff_max=conf.PUSH_BACKOFF_MAX
        )
        self.rng = rng or random.Random()
        timeout = conf.PUSH_TIMEOUT
        # Renew when less than this is left: enough for one more request to time out and be finished,
        # but never so much that every send renews.
        self.renew_margin = min(self.ttl / 2, max(self.ttl / 3, timeout + 1))
        self.breaker = CircuitBreaker(
            conf.PUSH_BREAKER_THRESHOLD, cooldown=conf.PUSH_BREAKER_COOLDOWN, cap=conf.PUSH_BACKOFF_MAX
        )
        if backends is None:
            # Built (and checked) before any row is claimed: a misconfigured backend is not the rows' fault.
            backends = {
                alias: get_backend(alias, timeout=timeout, concurrency=self.concurrency) for alias in backend_aliases()
            }
        self.sender = AsyncSender(backends, missing=build_result_missing)
        self._fields = _row_fields()
        self._budget_ends = clock.monotonic() + self.budget
        self._claims: dict[int, tuple[_Claim, list[_Row]]] = {}  # claimed by claim(), not yet delivered
        self._closed = False
        # Devices this worker deactivated: their other rows in its claims are not sent.
        self._dead_devices: dict[Any, str] = {}
        self._pruned = 0  # devices deactivated by the finish in progress

    # --- public -------------------------------------------------------------------------------------

    @property
    def budget_spent(self) -> bool:
        return self.clock.monotonic() >= self._budget_ends

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sender.close()

    def claim(self, limit: int | None = None) -> BatchLease:
        """Claim up to `limit` due rows under this worker's owner, one statement; each row's fence is bumped."""
        claim, rows = self._claim(limit or self.batch_size)
        self._claims[id(claim.batch)] = (claim, rows)
        return claim.batch

    def deliver(self, batch: BatchLease) -> DeliveryReport:
        """Send every row of `batch` (a claim of this worker's) and finish each as its answer arrives."""
        claim, rows = self._claims.pop(id(batch), (None, []))
        if claim is None:
            raise RuntimeError("PushWorker.deliver() needs a batch from this worker's claim().")
        report = DeliveryReport(owner=self.owner, batches=1, claimed=len(rows))
        self._pump(report, initial=[(claim, rows)], more_claims=False)
        return report

    def run(self) -> DeliveryReport:
        """Deliver due rows until none are left, the budget is spent or the breaker opens."""
        report = DeliveryReport(owner=self.owner)
        self._pump(report, initial=[], more_claims=True)
        return report

    # --- the loop ------------------------------------------------------------------------------------

    def _pump(self, report: DeliveryReport, *, initial: list[tuple[_Claim, list[_Row]]], more_claims: bool) -> None:
        """Claim -> send -> finish until there is nothing left to do; the slots stay full meanwhile."""
        claims: list[_Claim] = []
        waiting: deque[_Row] = deque()
        in_flight: dict[Any, _Row] = {}
        for claim, rows in initial:
            claims.append(claim)
            waiting.extend(rows)
        nothing_due_at: float | None = None  # real time of the last claim that found nothing
        stop = ""
        while True:
            self._keep_alive(claims)
            stop = stop or self._stop_reason()
            if stop and waiting:
                report.released += self._release_unstarted(list(waiting), stop)
                waiting.clear()
            # Claim more while no more than one round of slots is left, so a slot never waits on a claim.
            while (
                more_claims
                and not stop
                and len(waiting) + len(in_flight) <= self.concurrency
                and (nothing_due_at is None or time.monotonic() - nothing_due_at >= _RECHECK_SECONDS)
            ):
                claim, rows = self._claim(self.batch_size)
                report.batches += 1 if rows else 0
                report.claimed += len(rows)
                if not rows:
                    nothing_due_at = time.monotonic()
                    break
                nothing_due_at = None
                claims.append(claim)
                waiting.extend(rows)
            starting: list[tuple[Any, PushMessage]] = []
            unsent: list[tuple[_Row, Unsendable]] = []
            while waiting and len(in_flight) < self.concurrency and not (stop := stop or self._stop_reason()):
                self._keep_alive(claims)
                row = waiting.popleft()
                if row.pk not in row.claim.batch:
                    # Our renewal was refused for this row (someone else holds it): it must not be sent.
                    report.skipped += 1
                    self._settle(row.claim, "skipped")
                    log_event(
                        logger,
                        "lease_lost",
                        job=JOB,
                        id=row.pk,
                        owner=self.owner,
                        reason="skipped before sending: the lease renewal was refused for this row",
                    )
                    continue
                if ending := self._unsendable(row):
                    unsent.append((row, ending))  # expired, or its device is inactive: ends without a send
                    continue
                if self.hooks.before_send:
                    self.hooks.before_send(row.pk)
                row.sent_at = self._database_time(row.claim)
                in_flight[row.pk] = row
                starting.append((row.pk, row.message))
                report.sent += 1
            if unsent:
                self._end_unsent(unsent, report)
            if starting:
                self.sender.submit(starting)
            if stop and waiting:
                continue  # released at the top of the loop
            if not in_flight:
                if waiting:
                    continue
                if more_claims and not stop and nothing_due_at is not None:
                    break  # nothing due and nothing out: the drain is done
                if not more_claims or stop:
                    break
                continue
            answers = self.sender.collect(self._wait_seconds(claims))
            if not answers:
                continue
            group = [(in_flight.pop(pk), result) for pk, result in answers]
            if self.hooks.before_finish:
                self.hooks.before_finish([row.pk for row, _ in group])
            self._finish(group, report)
            claims = [claim for claim in claims if claim.open]
        report.breaker = self.breaker.reason
        report.budget_spent = stop == "budget"

    def _stop_reason(self) -> str:
        """Why no new row may start now: "budget", "breaker", or "" to go on."""
        if self.budget_spent:
            return "budget"
        return "breaker" if self.breaker.reason else ""

    # --- claims and lease upkeep ----------------------------------------------------------------------

    def _claim(self, limit: int) -> tuple[_Claim, list[_Row]]:
        # Read the local clock before the claim: the database set expiry = (its now) + ttl after this
        # instant, so `started + ttl` never overestimates how long the lease lasts.
        started = self.clock.monotonic()
        batch, values = Notification.objects.due(self.clock).claim_rows(
            owner=self.owner, ttl=timedelta(seconds=self.ttl), limit=limit, fields=self._fields, clock=self.clock
        )
        database_at = None if batch.expires_at is None else batch.expires_at - timedelta(seconds=self.ttl)
        claim = _Claim(batch=batch, deadline=started + self.ttl, database_at=database_at, local_at=started)
        # RETURNING keeps no order: send in due order, as the claim chose them.
        values.sort(key=lambda v: (v["next_attempt_at"], v["pk"]))
        rows = [
            _Row(
                pk=v["pk"],
                claim=claim,
                fence=batch.fences[v["pk"]],
                attempts=v["attempts"],
                message=_message(v),
                device_id=v.get("device"),
            )
            for v in values
        ]
        claim.open = len(rows)
        # One read per claim, and only when its rows name devices: which of them were deactivated.
        claim.inactive = inactive_devices({row.device_id for row in rows if row.device_id is not None})
        for row in rows:
            log_event(logger, "claim", job=JOB, id=row.pk, owner=self.owner, fence=row.fence, level=logging.DEBUG)
        return claim, rows

    def _keep_alive(self, claims: list[_Claim]) -> None:
        """Renew each claim's lease when it is close to running out, as long as the budget lasts."""
        if self.budget_spent:
            return
        now = self.clock.monotonic()
        for claim in claims:
            if not claim.batch.fences or claim.deadline - now > self.renew_margin:
                continue
            started = self.clock.monotonic()
            lost = Notification.objects.renew_batch(claim.batch, ttl=timedelta(seconds=self.ttl), clock=self.clock)
            claim.deadline = started + self.ttl
            for pk in lost:
                log_event(logger, "lease_lost", job=JOB, id=pk, owner=self.owner, reason="lease renewal refused")

    def _database_time(self, claim: _Claim) -> datetime:
        if claim.database_at is None:
            raise RuntimeError("a row was sent from an empty claim")
        return claim.database_at + timedelta(seconds=self.clock.monotonic() - claim.local_at)

    def _wait_seconds(self, claims: list[_Claim]) -> float:
        # Wake up in time to renew; the real-time cap keeps a FakeClock-driven run responsive.
        now = self.clock.monotonic()
        soonest = min((c.deadline - self.renew_margin - now for c in claims if c.batch.fences), default=1.0)
        return max(0.05, min(1.0, soonest))

    def _release_unstarted(self, rows: list[_Row], why: str) -> int:
        """Hand back rows we never sent, through the guard, without using any of their attempts."""
        if why == "breaker":
            hold = self.breaker.hold_for
            reason = f"{self.breaker.reason}. Held back for {hold:g} s without using an attempt."
            fields: dict[str, Any] = {"next_attempt_at": self.clock.now(timedelta(seconds=hold)), "last_error": reason}
        else:
            reason = "execution budget spent before this row was sent; released for the next drain"
            fields = {}  # claimable at once, due time unchanged
        by_claim: dict[int, tuple[_Claim, list[_Row]]] = {}
        for row in rows:
            by_claim.setdefault(id(row.claim), (row.claim, []))[1].append(row)
        released = 0
        for claim, mine in by_claim.values():
            ours = [row for row in mine if row.pk in claim.batch]
            released += Notification.objects.release_batch(
                claim.batch, [row.pk for row in ours], clock=self.clock, **fields
            )
            for _ in mine:
                self._settle(claim, "released")
            for row in ours:
                log_event(logger, "released", job=JOB, id=row.pk, owner=self.owner, fence=row.fence, reason=reason)
        return released

    # --- finishing -----------------------------------------------------------------------------------

    def _finish(self, group: list[tuple[_Row, SendResult]], report: DeliveryReport) -> None:
        """Record the answers that arrived together: one guarded statement for their rows, one INSERT."""
        plans = []
        for row, result in group:
            if self.breaker.record(result):
                log_event(logger, "breaker_open", job=JOB, id="-", owner=self.owner, reason=self.breaker.reason)
                # An event, not a leased write: kept so the console and the metrics see it after this worker is gone.
                BreakerOpening.objects.create(opened_at=self.clock.now(), owner=self.owner, reason=self.breaker.reason)
            plans.append(
                _Plan(
                    row, result, policy.decide(result, attempts_before=row.attempts, policy=self.policy, rng=self.rng)
                )
            )
        report.groups += 1
        stories = self._stories([plan for plan in plans if plan.transition.exhausted])
        try:
            with transaction.atomic():
                written = self._write(plans, stories)
        except DatabaseError as exc:
            # Not the guard (a refused row fails nothing): the group's text or a constraint. Finish the
            # rows one by one so one bad answer cannot hold back the others, or itself, forever.
            report.fallbacks += 1
            log_event(
                logger,
                "finish_fallback",
                job=JOB,
                id="-",
                owner=self.owner,
                rows=len(plans),
                reason=outside_text(f"{type(exc).__name__}: {exc}"),
                level=logging.WARNING,
            )
            written = []
            for plan in plans:
                written.extend(self._write_alone(plan, stories))
        for plan, landed in written:
            self._count(plan, landed, report)
        report.pruned += self._pruned
        self._pruned = 0

    def _write_alone(self, plan: _Plan, stories: dict[Any, str]) -> list[tuple[_Plan, bool]]:
        try:
            with transaction.atomic():
                return self._write([plan], stories)
        except DatabaseError as exc:
            why = outside_text(f"{type(exc).__name__}: {exc}", limit=200)
            bare = SendResult(
                outcome=plan.result.outcome,
                http_status=plan.result.http_status,
                latency_ms=plan.result.latency_ms,
                retry_after=plan.result.retry_after,
                reason=f"The provider's answer could not be stored as it was ({why}); recorded without its text.",
            )
            safe = _Plan(
                plan.row, bare, policy.decide(bare, attempts_before=plan.row.attempts, policy=self.policy, rng=self.rng)
            )
            stories = {plan.row.pk: "Gave up: out of attempts (the full story could not be stored)."}
            with transaction.atomic():
                return self._write([safe], stories)

    def _write(self, plans: list[_Plan], stories: dict[Any, str]) -> list[tuple[_Plan, bool]]:
        """One guarded UPDATE for every row of `plans`, then one INSERT for their attempts. Runs in a transaction."""
        now = self.clock.now()
        updates = []
        for plan in plans:
            t, result = plan.transition, plan.result
            fields: dict[str, Any] = {
                "status": t.status,
                "attempts": t.number,
                "last_error": stories.get(plan.row.pk, t.last_error),
            }
            if t.status == policy.DELIVERED:
                fields["delivered_at"] = now
                fields["provider_message_id"] = result.provider_message_id
            if t.delay is not None:
                # The due time comes from the database clock, never from this host's.
                fields["next_attempt_at"] = self.clock.now(timedelta(seconds=t.delay))
            updates.append((plan.row.lease, fields))
        landed = Notification.objects.release_each(updates, clock=self.clock)
        attempts: list[Receipt] = []
        written = []
        for plan in plans:
            row, result, t = plan.row, plan.result, plan.transition
            row.claim.batch.drop(row.pk)
            if row.pk in landed:
                attempts.append(
                    self._attempt(
                        row,
                        result,
                        outcome=result.outcome,
                        reason=result.reason,
                        number=t.number,
                        retry_in=t.delay,
                    )
                )
                written.append((plan, True))
                continue
            # Someone else owns the row now: record only that our answer came too late.
            lost = Notification.objects.refusal(row.lease, clock=self.clock)
            if "the row is gone" not in str(lost):
                reason = f"Answer not recorded ({result.outcome}: {result.reason or 'ok'}). {lost}"
                attempts.append(self._attempt(row, result, outcome=DeliveryAttempt.Outcome.LEASE_LOST, reason=reason))
            written.append((plan, False))
        insert_receipts(attempts, clock=self.clock)
        announce_notifications(
            (plan.row.pk, plan.transition.status, stories.get(plan.row.pk, plan.transition.last_error))
            for plan, ok in written
            if ok
        )
        self._prune([plan for plan, ok in written if ok and plan.transition.deactivate_device])
        touch_devices(
            {plan.row.device_id for plan, ok in written if ok and plan.transition.status == policy.DELIVERED},
            clock=self.clock,
        )
        return written

    def _prune(self, plans: list[_Plan]) -> None:
        """Deactivate the devices the provider called dead, in the finish's transaction, after the guard landed.

        Called only for rows whose guarded finish landed, inside its transaction: a stale worker (whose
        finish the guard refused) never deactivates anything, and a rolled-back finish takes the
        deactivation with it. The device's other queued rows end `failed` with the reason."""
        for plan in plans:
            device_id = plan.row.device_id
            if device_id is None:
                # A row made from a raw token: prune the registered device with that token, if there is one.
                device_id = device_for_token(plan.row.message.backend, plan.row.message.token)
            if device_id is None:
                continue
            reason = f"The provider refused its token: {plan.result.reason}"
            if deactivate_device(device_id=device_id, reason=reason, clock=self.clock):
                self._pruned += 1
                fail_queued_for_device(device_id=device_id, clock=self.clock)
            self._dead_devices[device_id] = reason

    def _unsendable(self, row: _Row) -> Unsendable | None:
        """Whether `row` must end without a send (expired; device inactive), judged at the send's database time."""
        reason = row.claim.inactive.get(row.device_id) or self._dead_devices.get(row.device_id)
        return unsendable(
            expires_at=row.message.expires_at,
            now=self._database_time(row.claim),
            device_active=None if row.device_id is None else reason is None,
            device_reason=reason or "",
        )

    def _end_unsent(self, rows: list[tuple[_Row, Unsendable]], report: DeliveryReport) -> None:
        """End rows that must not be sent, through their guard, with a `not_sent` receipt each (no attempt used)."""
        with transaction.atomic():
            landed = Notification.objects.release_each(
                [(row.lease, {"status": ending.status, "last_error": ending.reason}) for row, ending in rows],
                clock=self.clock,
            )
            now = self.clock.now()
            DeliveryAttempt.objects.bulk_create(
                DeliveryAttempt(
                    notification_id=row.pk, owner=self.owner, fence=row.fence, started_at=now, finished_at=now,
                    outcome=DeliveryAttempt.Outcome.NOT_SENT, reason=ending.reason,
                )
                for row, ending in rows
                if row.pk in landed
            )  # fmt: skip
            announce_notifications((row.pk, ending.status, ending.reason) for row, ending in rows if row.pk in landed)
        for row, ending in rows:
            row.claim.batch.drop(row.pk)
            if row.pk not in landed:
                report.lease_lost += 1
                self._settle(row.claim, "lease_lost")
                log_event(logger, "lease_lost", job=JOB, id=row.pk, owner=self.owner, reason="ending unsent refused")
                continue
            expired = ending.status == Notification.Status.EXPIRED
            report.expired += expired
            report.failed += not expired
            self._settle(row.claim, "expired" if expired else "failed")
            log_event(
                logger, ending.status, job=JOB, id=row.pk, owner=self.owner, fence=row.fence, reason=ending.reason
            )

    def _count(self, plan: _Plan, landed: bool, report: DeliveryReport) -> None:
        row, result, t = plan.row, plan.result, plan.transition
        if not landed:
            report.lease_lost += 1
            self._settle(row.claim, "lease_lost")
            log_event(
                logger,
                "lease_lost",
                job=JOB,
                id=row.pk,
                owner=self.owner,
                fence=row.fence,
                reason=f"answer ({result.outcome}) refused by the guard",
            )
            return
        setattr(report, result.outcome.value, getattr(report, result.outcome.value) + 1)
        failed = t.status == policy.FAILED
        report.failed += failed
        self._settle(row.claim, "failed" if failed else t.event)
        quiet = t.event in ("delivered", "retry")
        log_event(
            logger,
            t.event,
            job=JOB,
            id=row.pk,
            owner=self.owner,
            fence=row.fence,
            reason=t.last_error,
            level=logging.DEBUG if quiet else None,
        )

    def _settle(self, claim: _Claim, what: str) -> None:
        """Count one row of `claim` as done; when the claim's last row is done, log one line for all of it."""
        claim.counts[what] += 1
        claim.open -= 1
        if claim.open == 0:
            counts = claim.counts
            log_event(
                logger,
                "batch",
                job=JOB,
                id="-",
                owner=self.owner,
                rows=sum(counts.values()),
                delivered=counts["delivered"],
                retried=counts["retry"] + counts["unknown"],
                failed=counts["failed"],
                lease_lost=counts["lease_lost"],
                skipped=counts["skipped"],
                released=counts["released"],
                expired=counts["expired"],
            )

    def _stories(self, plans: list[_Plan]) -> dict[Any, str]:
        """The whole history for rows that ran out of attempts (rare path: one read for all of them)."""
        if not plans:
            return {}
        earlier: dict[Any, list[PastAttempt]] = {}
        stored = (
            DeliveryAttempt.objects.filter(notification_id__in=[plan.row.pk for plan in plans])
            .exclude(outcome=DeliveryAttempt.Outcome.LEASE_LOST)
            .order_by("started_at", "pk")
            .values_list("notification_id", "number", "outcome", "reason")
        )
        for pk, number, outcome, reason in stored:
            mine = earlier.setdefault(pk, [])
            mine.append(PastAttempt(number=number or len(mine) + 1, outcome=outcome, reason=reason))
        return {
            plan.row.pk: policy.story(
                plan.transition.last_error, earlier.get(plan.row.pk, []), plan.result, plan.transition.number
            )
            for plan in plans
        }

    def _attempt(
        self,
        row: _Row,
        result: SendResult,
        *,
        outcome: str,
        reason: str,
        number: int | None = None,
        retry_in: float | None = None,
    ) -> Receipt:
        # Both times on the database clock: the send's estimated from the claim, the end is the
        # database's now when the receipt is written (right after the guarded finish).
        return Receipt(
            notification_id=row.pk,
            owner=self.owner,
            fence=row.fence,
            started_at=row.sent_at,
            http_status=result.http_status,
            latency_ms=result.latency_ms,
            outcome=outcome,
            reason=reason,
            number=number,
            retry_in=retry_in,
        )


def _message(row: Mapping[str, Any]) -> PushMessage:
    return PushMessage(
        idempotency_key=str(row["idempotency_key"]),
        token=row["device_token"],
        title=row["title"],
        body=row["body"],
        data=row["data"] or {},
        options=row["options"] or {},
        collapse_key=row.get("collapse_key") or "",
        priority=row.get("priority") or "normal",
        expires_at=row.get("expires_at"),
        backend=row.get("backend") or "default",
    )


class WorkerOptions(TypedDict, total=False):
    """The `PushWorker` keywords `deliver_batch` and `drain` pass on (unset or None: the WEAVE setting)."""

    clock: Clock
    owner: str | None
    hooks: Hooks | None
    batch_size: int | None
    concurrency: int | None
    budget: float | None
    ttl: float | None
    rng: random.Random | None
    backends: Mapping[str, PushBackend] | None


def deliver_batch(**options: Unpack[WorkerOptions]) -> DeliveryReport:
    """Claim one batch and deliver it."""
    worker = PushWorker(**options)
    try:
        return worker.deliver(worker.claim())
    finally:
        worker.close()


def drain(*, enqueue_more: bool = True, **options: Unpack[WorkerOptions]) -> DeliveryReport:
    """Deliver due notifications until none are left or the budget is spent; then re-enqueue if rows remain."""
    worker = PushWorker(**options)
    try:
        report = worker.run()
    finally:
        worker.close()
    if report.budget_spent and enqueue_more and Notification.objects.claimable(worker.clock).exists():
        queue.enqueue_drain()
        report.more_enqueued = True
    log_event(
        logger,
        "drain",
        job=JOB,
        id="-",
        owner=report.owner,
        delivered=report.delivered,
        retried=report.temporary + report.unknown,
        failed=report.failed,
        expired=report.expired,
        pruned=report.pruned,
        lease_lost=report.lease_lost,
        released=report.released,
        reason=report.breaker,
    )
    return report

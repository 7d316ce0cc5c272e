"""The push worker: claim a batch under one lease, send concurrently, finish each row behind its guard.

    report = drain()                      # what the django-q2 task runs
    report = deliver_batch(clock=clock)   # one batch; tests inject a FakeClock, a provider and hooks

Threads: the HTTP sends run on a thread pool; every database statement runs on the calling thread
(one connection, so a test's transaction sees it all, and a worker never holds more than one
connection). The caller finishes responses as they arrive, grouping those that arrived together into
one transaction: per row one guarded UPDATE (status, counters, due time, lease released), then one
INSERT for all their attempt rows.
"""

import logging
import random
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from notifications import queue
from notifications.models import DeliveryAttempt, Notification
from notifications.providers import HttpJsonProvider, Outcome, Provider, PushMessage, SendResult
from weave.conf import weave_settings
from weave.events import log_event
from weave.leases import BatchLease, Clock, Lease, default_clock, new_owner
from weave.retry import backoff_seconds

logger = logging.getLogger("weave.notifications")
JOB = "notification"
_ROW_FIELDS = ("pk", "device_token", "title", "body", "data", "idempotency_key", "attempts")


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
    failed: int = 0  # rows that became `failed` (permanent, or out of attempts)
    skipped: int = 0  # rows found lost before they were sent
    released: int = 0  # unstarted rows handed back (budget spent or breaker open)
    budget_spent: bool = False
    breaker: str = ""  # why the circuit breaker opened, if it did
    more_enqueued: bool = False

    def add(self, other: "DeliveryReport") -> None:
        for name in ("batches", "claimed", "sent", "delivered", "temporary", "permanent", "unknown"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("lease_lost", "failed", "skipped", "released"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.budget_spent = self.budget_spent or other.budget_spent
        self.breaker = self.breaker or other.breaker

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Hooks:
    """Test seams, called on the worker's own thread (the one with the database connection)."""

    # Right before a row is handed to the sending pool (after the budget and lease checks).
    before_send: Callable[[Any], None] | None = None
    # Right before a group of responses is finished, with their primary keys.
    before_finish: Callable[[list[Any]], None] | None = None


@dataclass
class _InFlight:
    pk: Any
    lease: Lease
    attempts: int  # the row's attempts when claimed; only our lease can change it meanwhile
    sent_at: datetime  # database time of the send, estimated without a query (see PushWorker.claim)


@dataclass
class CircuitBreaker:
    """Open after `threshold` systemic failures in a row, or at once on a fatal one (bad credentials)."""

    threshold: int
    run: int = 0
    reason: str = ""

    def record(self, result: SendResult, owner: str) -> None:
        if self.reason:
            return
        if result.fatal:
            self.reason = f"Circuit breaker opened: {result.reason}"
        elif result.systemic:
            self.run += 1
            if self.run >= self.threshold:
                self.reason = (
                    f"Circuit breaker opened after {self.run} provider failures in a row (last: {result.reason})"
                )
        elif result.outcome in (Outcome.DELIVERED, Outcome.PERMANENT):
            self.run = 0  # the provider answered sensibly: the run of failures is broken
        if self.reason:
            log_event(logger, "breaker_open", job=JOB, id="-", owner=owner, reason=self.reason)


class PushWorker:
    """One worker's drain: claim batches under one owner and deliver them within a time budget."""

    def __init__(
        self,
        *,
        provider: Provider | None = None,
        clock: Clock = default_clock,
        owner: str | None = None,
        hooks: Hooks | None = None,
        batch_size: int | None = None,
        concurrency: int | None = None,
        budget: float | None = None,
        ttl: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        conf = weave_settings
        self.clock = clock
        self.owner = owner or new_owner("push:")
        self.hooks = hooks or Hooks()
        self.batch_size = batch_size or conf.PUSH_BATCH_SIZE
        self.concurrency = max(1, concurrency or conf.PUSH_CONCURRENCY)
        self.budget = conf.PUSH_BUDGET if budget is None else budget
        self.ttl = float(ttl or conf.PUSH_LEASE_TTL)
        self.max_attempts = conf.PUSH_MAX_ATTEMPTS
        self.backoff_base = conf.PUSH_BACKOFF_BASE
        self.backoff_max = conf.PUSH_BACKOFF_MAX
        self.cooldown = conf.PUSH_BREAKER_COOLDOWN
        self.rng = rng or random.Random()
        timeout = conf.PUSH_TIMEOUT
        # Renew when less than this is left: enough for one more request to time out and be finished,
        # but never so much that every send renews.
        self.renew_margin = min(self.ttl / 2, max(self.ttl / 3, timeout + 1))
        self.breaker = CircuitBreaker(conf.PUSH_BREAKER_THRESHOLD)
        self._own_provider = provider is None
        self.provider = provider or _default_provider(self.concurrency)
        self._budget_ends = clock.monotonic() + self.budget
        self._deadline = 0.0  # local estimate of the batch lease's expiry (clock.monotonic() scale)
        self._claimed_at: tuple[datetime, float] | None = None  # (database time, local time) of the last claim

    # --- public -------------------------------------------------------------------------------------

    @property
    def budget_spent(self) -> bool:
        return self.clock.monotonic() >= self._budget_ends

    def close(self) -> None:
        if self._own_provider:
            self.provider.close()

    def claim(self, limit: int | None = None) -> BatchLease:
        """Claim up to `limit` due rows under this worker's owner, one statement; each row's fence is bumped."""
        # Read the local clock before the claim: the database set expiry = (its now) + ttl after this
        # instant, so `started + ttl` never overestimates how long the lease lasts.
        started = self.clock.monotonic()
        batch = Notification.objects.due(self.clock).claim_batch(
            owner=self.owner, ttl=timedelta(seconds=self.ttl), limit=limit or self.batch_size, clock=self.clock
        )
        self._deadline = started + self.ttl
        if batch.expires_at is not None:
            # The database's time at the claim, paired with our local clock at the same moment: later
            # database times (an attempt's send) follow from local elapsed time, with no extra query.
            self._claimed_at = (batch.expires_at - timedelta(seconds=self.ttl), started)
        for pk, fence in batch.fences.items():
            log_event(logger, "claim", job=JOB, id=pk, owner=self.owner, fence=fence)
        return batch

    def deliver(self, batch: BatchLease) -> DeliveryReport:
        """Send every row of `batch` (up to `concurrency` at once) and finish each as its answer arrives."""
        report = DeliveryReport(owner=self.owner, batches=1, claimed=len(batch))
        if not batch.fences:
            return report
        rows = {row["pk"]: row for row in Notification.objects.filter(pk__in=list(batch.fences)).values(*_ROW_FIELDS)}
        queue = sorted(batch.fences)
        in_flight: dict[Future[SendResult], _InFlight] = {}
        stop = ""
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="push-send") as pool:
            while queue or in_flight:
                # Checked before every send, and also while all slots are busy, so that unstarted rows
                # go back as soon as the budget runs out or the breaker opens, not after the slowest request.
                while queue and not (stop := stop or self._stop_reason()) and len(in_flight) < self.concurrency:
                    self._keep_alive(batch)
                    pk = queue.pop(0)
                    if pk not in batch or pk not in rows:
                        # Our renewal was refused for this row (someone else holds it) or it was deleted:
                        # either way it must not be sent.
                        report.skipped += 1
                        log_event(
                            logger,
                            "lease_lost",
                            job=JOB,
                            id=pk,
                            owner=self.owner,
                            reason="skipped before sending: the batch lease renewal was refused for this row",
                        )
                        continue
                    if self.hooks.before_send:
                        self.hooks.before_send(pk)
                    row = rows[pk]
                    future = pool.submit(self.provider.send, _message(row))
                    in_flight[future] = _InFlight(
                        pk=pk, lease=batch.lease(pk), attempts=row["attempts"], sent_at=self._database_time()
                    )
                    report.sent += 1
                if queue and (stop := stop or self._stop_reason()):
                    report.released += self._release_unstarted(batch, queue, stop)
                    queue = []
                if not in_flight:
                    continue
                done, _ = wait(in_flight, timeout=self._wait_seconds(), return_when=FIRST_COMPLETED)
                if not done:
                    self._keep_alive(batch)
                    continue
                group = [(in_flight.pop(future), future.result()) for future in done]
                if self.hooks.before_finish:
                    self.hooks.before_finish([item.pk for item, _ in group])
                self._finish(batch, group, report)
        report.breaker = self.breaker.reason
        report.budget_spent = stop == "budget"
        return report

    def _stop_reason(self) -> str:
        """Why no new row may start now: "budget", "breaker", or "" to go on."""
        if self.budget_spent:
            return "budget"
        return "breaker" if self.breaker.reason else ""

    def run(self) -> DeliveryReport:
        """Claim and deliver batches until nothing is due, the budget is spent or the breaker opens."""
        report = DeliveryReport(owner=self.owner)
        while True:
            if self.budget_spent:
                report.budget_spent = True
                break
            if self.breaker.reason:
                report.breaker = self.breaker.reason
                break
            batch = self.claim()
            if not batch.fences:
                break
            report.add(self.deliver(batch))
        return report

    # --- lease upkeep ----------------------------------------------------------------------------------

    def _keep_alive(self, batch: BatchLease) -> None:
        """Renew the batch lease when it is close to running out, as long as the budget lasts."""
        if not batch.fences or self.budget_spent:
            return
        if self._deadline - self.clock.monotonic() > self.renew_margin:
            return
        started = self.clock.monotonic()
        lost = Notification.objects.renew_batch(batch, ttl=timedelta(seconds=self.ttl), clock=self.clock)
        self._deadline = started + self.ttl
        for pk in lost:
            log_event(logger, "lease_lost", job=JOB, id=pk, owner=self.owner, reason="batch lease renewal refused")

    def _database_time(self) -> datetime:
        db_time, local = self._claimed_at or (None, 0.0)
        if db_time is None:
            raise RuntimeError("PushWorker.deliver() needs a batch from this worker's claim().")
        return db_time + timedelta(seconds=self.clock.monotonic() - local)

    def _wait_seconds(self) -> float:
        # Wake up in time to renew; the real-time cap keeps a FakeClock-driven run responsive.
        return max(0.05, min(1.0, self._deadline - self.renew_margin - self.clock.monotonic()))

    def _release_unstarted(self, batch: BatchLease, pks: list[Any], why: str) -> int:
        """Hand back rows we never sent, through the guard, without using any of their attempts."""
        if why == "breaker":
            reason = f"{self.breaker.reason}. Held back for {self.cooldown:g} s without using an attempt."
            fields: dict[str, Any] = {
                "next_attempt_at": self.clock.now(timedelta(seconds=self.cooldown)),
                "last_error": reason,
            }
        else:
            reason = "execution budget spent before this row was sent; released for the next drain"
            fields = {}  # claimable at once, due time unchanged
        fences = {pk: batch.fences[pk] for pk in pks if pk in batch}
        released = Notification.objects.release_batch(batch, pks, clock=self.clock, **fields)
        for pk, fence in fences.items():
            log_event(logger, "released", job=JOB, id=pk, owner=self.owner, fence=fence, reason=reason)
        return released

    # --- finishing -------------------------------------------------------------------------------------

    def _finish(self, batch: BatchLease, group: list[tuple[_InFlight, SendResult]], report: DeliveryReport) -> None:
        """Record the answers that arrived together in one transaction: one guarded release for all their
        rows (each at its own fence), then all attempt rows. A row whose guard fails gets only a `lease_lost`
        attempt."""
        planned = []
        for item, result in group:
            self.breaker.record(result, self.owner)
            fields, event = self._next_state(item, result)
            planned.append((item, result, fields, event))
        attempts: list[DeliveryAttempt] = []
        events: list[tuple[str, _InFlight, str]] = []
        with transaction.atomic():
            landed = Notification.objects.release_many(
                batch.owner, {item.pk: (item.lease.fence, fields) for item, _, fields, _ in planned}, clock=self.clock
            )
            for item, result, fields, event in planned:
                batch.drop(item.pk)
                if item.pk not in landed:
                    # Someone else owns the row now: record only that our answer came too late.
                    lost = Notification.objects.refusal(item.lease, clock=self.clock)
                    reason = f"Answer not recorded ({result.outcome}: {result.reason or 'ok'}). {lost}"
                    attempts.append(self._attempt(item, result, DeliveryAttempt.Outcome.LEASE_LOST, reason))
                    events.append(("lease_lost", item, reason))
                    report.lease_lost += 1
                    continue
                attempt = self._attempt(item, result, result.outcome, fields.get("last_error", result.reason))
                # The retry's due time, on the database clock, for the timeline to measure the next send against.
                attempt.retry_due_at = fields.get("next_attempt_at")
                attempts.append(attempt)
                events.append((event, item, fields.get("last_error", "")))
                setattr(report, result.outcome.value, getattr(report, result.outcome.value) + 1)
                report.failed += fields.get("status") == Notification.Status.FAILED
            DeliveryAttempt.objects.bulk_create(attempts)
        for event, item, reason in events:
            log_event(logger, event, job=JOB, id=item.pk, owner=item.lease.owner, fence=item.lease.fence, reason=reason)

    def _next_state(self, item: _InFlight, result: SendResult) -> tuple[dict[str, Any], str]:
        """Return the row's new fields and the event name for one answer."""
        attempt = item.attempts + 1
        if result.outcome == Outcome.DELIVERED:
            fields = {
                "status": Notification.Status.DELIVERED,
                "attempts": attempt,
                "delivered_at": self.clock.now(),
                "provider_message_id": result.provider_message_id,
                "last_error": result.reason,  # a malformed 2xx body is noted here
            }
            return fields, "delivered"
        if result.outcome == Outcome.PERMANENT:
            reason = f"Failed permanently on attempt {attempt}: {result.reason}"
            return {"status": Notification.Status.FAILED, "attempts": attempt, "last_error": reason}, "failed"
        if attempt >= self.max_attempts:
            reason = self._story(item, result, attempt)
            return {"status": Notification.Status.FAILED, "attempts": attempt, "last_error": reason}, "failed"
        if result.retry_after is not None:
            delay = min(result.retry_after, self.backoff_max)
            why = "as the provider asked"
        else:
            delay = backoff_seconds(attempt, base=self.backoff_base, cap=self.backoff_max, rng=self.rng)
            why = "exponential backoff with jitter"
        reason = f"{result.reason} Attempt {attempt} of {self.max_attempts}; next try in {delay:.1f} s ({why})."
        fields = {
            "status": Notification.Status.PENDING,
            "attempts": attempt,
            # The due time comes from the database clock, never from this host's.
            "next_attempt_at": self.clock.now(timedelta(seconds=delay)),
            "last_error": reason,
        }
        return fields, "retry" if result.outcome == Outcome.TEMPORARY else "unknown"

    def _story(self, item: _InFlight, result: SendResult, attempt: int) -> str:
        """The full history for a row that ran out of attempts (rare path: one extra read)."""
        earlier = (
            DeliveryAttempt.objects.filter(notification_id=item.pk)
            .exclude(outcome=DeliveryAttempt.Outcome.LEASE_LOST)
            .order_by("started_at", "pk")
            .values_list("outcome", "reason")
        )
        lines = [f"{n}. {outcome}: {reason.split(' Attempt ')[0]}" for n, (outcome, reason) in enumerate(earlier, 1)]
        lines.append(f"{len(lines) + 1}. {result.outcome}: {result.reason}")
        maybe = any(line.split(". ", 1)[1].startswith("unknown") for line in lines)
        head = f"Gave up after {attempt} attempts (PUSH_MAX_ATTEMPTS={self.max_attempts})."
        if maybe:
            head += " At least one attempt got no answer, so the provider may have delivered it."
        return "\n".join([head, *lines])

    def _attempt(self, item: _InFlight, result: SendResult, outcome: str, reason: str) -> DeliveryAttempt:
        return DeliveryAttempt(
            notification_id=item.pk,
            owner=item.lease.owner,
            fence=item.lease.fence,
            # Both times on the database clock: the send's estimated from the claim, the end read at finish.
            started_at=item.sent_at,
            finished_at=self.clock.now(),
            http_status=result.http_status,
            latency_ms=result.latency_ms,
            outcome=outcome,
            reason=reason,
        )


def _message(row: dict[str, Any]) -> PushMessage:
    return PushMessage(
        idempotency_key=str(row["idempotency_key"]),
        to=row["device_token"],
        title=row["title"],
        body=row["body"],
        data=row["data"] or {},
    )


def _default_provider(concurrency: int) -> Provider:
    url = weave_settings.PUSH_URL
    if not url:
        raise ImproperlyConfigured("WEAVE PUSH_URL is not set: there is no push provider to deliver to.")
    if not url.startswith(("http://", "https://")):
        # Refused here, before any row is claimed: a bad URL is not the notifications' fault.
        raise ImproperlyConfigured(f"WEAVE PUSH_URL must be an http:// or https:// URL, not {url!r}.")
    return HttpJsonProvider(
        url=url, token=weave_settings.PUSH_TOKEN, timeout=weave_settings.PUSH_TIMEOUT, concurrency=concurrency
    )


class WorkerOptions(TypedDict, total=False):
    """The `PushWorker` keywords `deliver_batch` and `drain` pass on (unset or None: the WEAVE setting)."""

    provider: Provider | None
    clock: Clock
    owner: str | None
    hooks: Hooks | None
    batch_size: int | None
    concurrency: int | None
    budget: float | None
    ttl: float | None
    rng: random.Random | None


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
        lease_lost=report.lease_lost,
        released=report.released,
        reason=report.breaker,
    )
    return report

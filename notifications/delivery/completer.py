"""The completer: record answers behind their rows' guards, in as few transactions as the answers allow.

A group of answers is finished in ONE transaction: one guarded `UPDATE ... FROM (VALUES ...)` for all
its rows (each under its own owner, fence and live expiry, judged by the database clock), then one
multi-row INSERT of their receipts. A row the guard refuses changes nothing and gets a `lease_lost`
receipt. If the transaction fails for any reason but the guard, the group is finished again row by
row, and a row whose own finish still fails is recorded without its outside text: its attempt count
always grows. Devices the provider called dead are deactivated inside the same transaction, after
their row's guard landed. `last_used_at` of delivered devices is not on this path: it is written in
one statement per second at most (`flush_touches`).

`Completer` does the database work on whatever thread calls it; `CompleterThread` gives it a thread
and a connection of its own, so the worker's thread goes on claiming and starting sends meanwhile.
"""

import logging
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections, transaction

from notifications.backends import SendResult
from notifications.delivery import policy
from notifications.delivery.inbox import Inbox
from notifications.delivery.policy import PastAttempt, Transition
from notifications.delivery.receipts import Receipt, insert_receipts
from notifications.delivery.report import DeliveryReport, Hooks
from notifications.delivery.rows import JOB, Row, log_lost, logger, reconnect_if_cut
from notifications.devices import (
    Unsendable,
    deactivate_device,
    device_for_token,
    fail_queued_for_device,
    touch_devices,
)
from notifications.models import DeliveryAttempt, Notification
from notifications.signals import send_notification_signals
from weave.edge import outside_text
from weave.events import log_event
from weave.jobs import RetryPolicy
from weave.leases import Clock

DONE, FAILED_WITH = "done", "completer_error"
# `last_used_at` is a hint for operators, not a lease: one write per this many seconds is plenty.
TOUCH_EVERY_SECONDS = 1.0


@dataclass
class Plan:
    row: Row
    result: SendResult
    transition: Transition


@dataclass
class Finished:
    """What one group's finish did, for the worker's thread to count: each plan and whether its guard landed."""

    plans: list[tuple[Plan, bool]] = field(default_factory=list)
    pruned: int = 0  # devices this finish deactivated
    dead: dict[Any, str] = field(default_factory=dict)  # devices found dead: id -> reason
    fallback: bool = False  # the one-statement finish failed and the rows were finished one by one


class Completer:
    """Finishes groups of answers and ends rows that must not be sent, each behind its rows' guards."""

    def __init__(
        self, *, owner: str, clock: Clock, retry: RetryPolicy, rng: random.Random, hooks: Hooks | None = None
    ) -> None:
        self.owner = owner
        self.clock = clock
        self.retry = retry
        self.rng = rng
        self.hooks = hooks or Hooks()
        self._touch: set[Any] = set()
        self._touched_at = time.monotonic()

    # --- answers -----------------------------------------------------------------------------------

    def finish(self, group: list[tuple[Row, SendResult]]) -> Finished:
        """Record the answers of `group` in one transaction (row by row if that fails)."""
        if self.hooks.before_finish:
            self.hooks.before_finish([row.pk for row, _ in group])
        plans = [Plan(row, result, self._decide(row, result)) for row, result in group]
        stories = self._stories([plan for plan in plans if plan.transition.exhausted])
        done = Finished()
        try:
            with transaction.atomic():
                done.plans = self._write(plans, stories, done)
        except DatabaseError as exc:
            # Not the guard (a refused row fails nothing): the group's text or a constraint. Finish the
            # rows one by one so one bad answer cannot hold back the others, or itself, forever.
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
            done = Finished(fallback=True)
            # A cut link can fail the COMMIT after it landed (its reply lost), or the on-commit signals
            # right after it: what landed is read back on a fresh connection and not redone.
            reconnect_if_cut(exc)
            landed = self._landed_already(plans)
            for plan in plans:
                if plan.row.pk in landed:
                    done.plans.append((plan, True))
                    continue
                done.plans.extend(self._write_alone(plan, stories, done))
            self._send_signals_of_landed([plan for plan in plans if plan.row.pk in landed], stories)
        self._touch.update(p.row.device_id for p, ok in done.plans if ok and p.transition.status == policy.DELIVERED)
        self.flush_touches(force=False)
        return done

    def _decide(self, row: Row, result: SendResult) -> Transition:
        return policy.decide(result, attempts_before=row.attempts, policy=self.retry, rng=self.rng)

    def _landed_already(self, plans: list[Plan]) -> set[Any]:
        """The pks of `plans` whose finish is on record under this attempt's own fence and owner, read on a
        fresh connection: the group's COMMIT landed though it raised. Another worker's refusal never writes
        there, and a `lease_lost` receipt says our finish did not land, so neither counts."""
        mine = {(plan.row.pk, plan.row.fence, plan.row.owner) for plan in plans}
        found = DeliveryAttempt.objects.filter(notification_id__in=[pk for pk, _, _ in mine]).exclude(
            outcome=DeliveryAttempt.Outcome.LEASE_LOST
        )
        return {
            pk
            for pk, fence, owner in found.values_list("notification_id", "fence", "owner")
            if (pk, fence, owner) in mine
        }

    @staticmethod
    def _send_signals_of_landed(plans: list[Plan], stories: dict[Any, str]) -> None:
        """The signals of finishes that landed with their COMMIT's reply lost (their on-commit ones never ran)."""
        send_notification_signals(
            (plan.row.pk, plan.transition.status, stories.get(plan.row.pk, plan.transition.last_error))
            for plan in plans
        )

    def _write_alone(self, plan: Plan, stories: dict[Any, str], done: Finished) -> list[tuple[Plan, bool]]:
        try:
            with transaction.atomic():
                return self._write([plan], stories, done)
        except DatabaseError as exc:
            why = outside_text(f"{type(exc).__name__}: {exc}", limit=200)
            bare = SendResult(
                outcome=plan.result.outcome,
                http_status=plan.result.http_status,
                latency_ms=plan.result.latency_ms,
                retry_after=plan.result.retry_after,
                reason=f"The provider's answer could not be stored as it was ({why}); recorded without its text.",
            )
            safe = Plan(plan.row, bare, self._decide(plan.row, bare))
            stories = {plan.row.pk: "Gave up: out of attempts (the full story could not be stored)."}
            with transaction.atomic():
                return self._write([safe], stories, done)

    def _write(self, plans: list[Plan], stories: dict[Any, str], done: Finished) -> list[tuple[Plan, bool]]:
        """One guarded UPDATE for every row of `plans`, then one INSERT for their receipts. Runs in a transaction."""
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
            if t.status != policy.PENDING:
                fields["finished_at"] = now
            if t.delay is not None:
                # The due time comes from the database clock, never from this host's.
                fields["next_attempt_at"] = self.clock.now(timedelta(seconds=t.delay))
            updates.append((plan.row.lease, fields))
        # The due times as the finish stored them: a retry's receipt carries its row's, not a second reading.
        landed = Notification.objects.release_each_returning(updates, ("next_attempt_at",), clock=self.clock)
        receipts: list[Receipt] = []
        written = []
        for plan in plans:
            row, result, t = plan.row, plan.result, plan.transition
            if row.pk in landed:
                said: dict[str, Any] = {"outcome": result.outcome, "reason": result.reason, "number": t.number}
                if t.delay is not None:
                    # The finish read the clock once for the due time: the receipt ends at that reading, so its
                    # due time is exactly the delay after its end.
                    due = landed[row.pk]["next_attempt_at"]
                    said.update(retry_at=due, finished_at=due - timedelta(seconds=t.delay))
                receipts.append(_receipt(row, result, **said))
                written.append((plan, True))
                continue
            # Someone else owns the row now: record only that our answer came too late.
            lost = Notification.objects.refusal(row.lease, clock=self.clock)
            if not lost.row_gone:
                reason = f"Answer not recorded ({result.outcome}: {result.reason or 'ok'}). {lost}"
                receipts.append(_receipt(row, result, outcome=DeliveryAttempt.Outcome.LEASE_LOST, reason=reason))
            written.append((plan, False))
        insert_receipts(receipts, clock=self.clock)
        # Signals go out once this transaction commits (a rolled-back finish sends none).
        send_notification_signals(
            (plan.row.pk, plan.transition.status, stories.get(plan.row.pk, plan.transition.last_error))
            for plan, ok in written
            if ok
        )
        self._prune([plan for plan, ok in written if ok and plan.transition.deactivate_device], done)
        return written

    def _prune(self, plans: list[Plan], done: Finished) -> None:
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
                done.pruned += 1
                fail_queued_for_device(device_id=device_id, clock=self.clock)
            done.dead[device_id] = reason

    def _stories(self, plans: list[Plan]) -> dict[Any, str]:
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

    # --- rows that end without a send -------------------------------------------------------------

    def end_unsent(self, rows: list[tuple[Row, Unsendable]]) -> set[Any]:
        """End rows that must not be sent through their guard, a `not_sent` receipt each (no attempt used).

        Return the pks whose guard landed; `row.sent_at` dates the decision."""
        with transaction.atomic():
            landed = Notification.objects.release_each(
                [
                    (row.lease, {"status": ending.status, "last_error": ending.reason, "finished_at": self.clock.now()})
                    for row, ending in rows
                ],
                clock=self.clock,
            )
            insert_receipts(
                [
                    _receipt(row, None, outcome=DeliveryAttempt.Outcome.NOT_SENT, reason=ending.reason)
                    for row, ending in rows
                    if row.pk in landed
                ],
                clock=self.clock,
            )
            send_notification_signals(
                (row.pk, ending.status, ending.reason) for row, ending in rows if row.pk in landed
            )
        return landed

    # --- devices ---------------------------------------------------------------------------------

    def flush_touches(self, *, force: bool = True) -> None:
        """Write `last_used_at` of the devices delivered to since the last flush (one statement)."""
        if not self._touch or (not force and time.monotonic() - self._touched_at < TOUCH_EVERY_SECONDS):
            return
        devices, self._touch = self._touch, set()
        self._touched_at = time.monotonic()
        try:
            touch_devices(devices, clock=self.clock)
        except DatabaseError as exc:  # a hint for operators: never worth failing a drain over
            # A cut link: the next finish on this thread goes out on a fresh connection, not this dead one.
            reconnect_if_cut(exc)
            log_event(logger, "touch_failed", job=JOB, id="-", owner=self.owner, reason=outside_text(str(exc)))


def _receipt(
    row: Row,
    result: SendResult | None,
    *,
    outcome: str,
    reason: str,
    number: int | None = None,
    retry_at: datetime | None = None,
    finished_at: datetime | None = None,
) -> Receipt:
    # Both times on the database clock: the send's estimated from the claim, the end is the finish's
    # reading for a retry, else the database's now when the receipt is written (right after the finish).
    return Receipt(
        notification_id=row.pk,
        owner=row.owner,
        fence=row.fence,
        started_at=row.sent_at,
        http_status=None if result is None else result.http_status,
        latency_ms=None if result is None else result.latency_ms,
        outcome=outcome,
        reason=reason,
        number=number,
        retry_at=retry_at,
        finished_at=finished_at,
        backend=row.message.backend,
    )


# --- counting (on the worker's thread) ---------------------------------------------------------------


def count(done: Finished, report: DeliveryReport) -> None:
    """Count and log what a finish did, and settle each row in its claim."""
    report.groups += 1
    report.fallbacks += done.fallback
    report.pruned += done.pruned
    for plan, landed in done.plans:
        row, result, t = plan.row, plan.result, plan.transition
        if not landed:
            report.lease_lost += 1
            row.claim.settle("lease_lost")
            log_lost(row.pk, row.owner, f"answer ({result.outcome}) refused by the guard", fence=row.fence)
            continue
        setattr(report, result.outcome.value, getattr(report, result.outcome.value) + 1)
        failed = t.status == policy.FAILED
        report.failed += failed
        row.claim.settle("failed" if failed else t.event)
        quiet = t.event in ("delivered", "retry")
        level = logging.DEBUG if quiet else None
        log_event(
            logger, t.event, job=JOB, id=row.pk, owner=row.owner, fence=row.fence, reason=t.last_error, level=level
        )


def count_unsent(rows: list[tuple[Row, Unsendable]], landed: set[Any], report: DeliveryReport) -> None:
    """Count and log rows ended without a send."""
    for row, ending in rows:
        if row.pk not in landed:
            report.lease_lost += 1
            row.claim.settle("lease_lost")
            log_lost(row.pk, row.owner, "ending unsent refused")
            continue
        expired = ending.status == Notification.Status.EXPIRED
        report.expired += expired
        report.failed += not expired
        row.claim.settle("expired" if expired else "failed")
        log_event(logger, ending.status, job=JOB, id=row.pk, owner=row.owner, fence=row.fence, reason=ending.reason)


# --- a thread of its own --------------------------------------------------------------------------


class CompleterThread:
    """Runs a `Completer` on its own thread and connection; each group's `Finished` goes to `inbox`.

    Groups handed in while a finish runs wait in a queue and are finished together next, after up
    to `gather` seconds for more: the busier the worker, the fewer and larger its transactions. A
    group is finished at once when nothing else is out (`more=False`: no answer can join it), and
    when the group before it came more than a gather earlier: answers arrive more slowly than one
    per gather, so at low load each push would wait it out for nothing. A group handed in while
    rows wait for a free slot (`backlog=True`) waits up to `backlog_gather` instead: those rows wait
    for the slots, not for this finish, so a longer gather costs them nothing while fewer
    transactions leave more of the process to the sends.
    """

    def __init__(
        self, completer: Completer, inbox: Inbox, *, gather: float, backlog_gather: float | None = None
    ) -> None:
        self.completer = completer
        self.inbox = inbox
        self.gather = gather
        self.backlog_gather = gather if backlog_gather is None else backlog_gather
        self._last_submit = -float("inf")  # when the previous group was handed in (monotonic)
        # Each group with how long to wait for more after it (0: finish it at once).
        self._queue: queue.SimpleQueue[tuple[list[tuple[Row, SendResult]], float] | None] = queue.SimpleQueue()
        # Named after the worker's thread: whatever watches that thread's connections sees this one's too.
        name = f"{threading.current_thread().name}-completer"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, group: list[tuple[Row, SendResult]], *, more: bool = True, backlog: bool = False) -> None:
        """Hand in `group`; `more`: other sends are still out, so more answers may come within the gather;
        `backlog`: rows are waiting for a free slot as well."""
        now = time.monotonic()
        if not more:
            wait = 0.0
        elif backlog:
            wait = self.backlog_gather
        else:
            wait = self.gather if now - self._last_submit < self.gather else 0.0
        self._last_submit = now
        self._queue.put((group, wait))

    def close(self) -> None:
        """Finish what was handed in, write the pending device touches, and end the thread."""
        self._queue.put(None)
        self._thread.join()

    def _next(self) -> tuple[list[tuple[Row, SendResult]], bool]:
        """The next group (everything queued, and what arrives within `gather`), and whether to stop after it."""
        first = self._queue.get()
        if first is None:
            return [], True
        group, wait = list(first[0]), first[1]
        deadline = time.monotonic() + wait
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return group, False
            if item is None:
                return group, True
            group.extend(item[0])

    def _run(self) -> None:
        try:
            stop = False
            while not stop:
                group, stop = self._next()
                if group:
                    self.inbox.post(DONE, self.completer.finish(group))
            self.completer.flush_touches()
        except BaseException as exc:  # noqa: BLE001 - handed to the worker's thread, which raises it
            self.inbox.post(FAILED_WITH, exc)
        finally:
            connections.close_all()  # this thread's connections only

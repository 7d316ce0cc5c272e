"""The claim buffer: claim due rows, keep their leases alive, hand back the rows never started.

Every statement here is a guarded write of the lease queryset, judged by the database clock. The
buffer runs on the worker's thread (its connection) and knows nothing of sending or finishing.
"""

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import DatabaseError

from notifications.delivery.rows import JOB, ROW_FIELDS, Claim, Row, log_lost, logger, message_from, reconnect_if_cut
from notifications.devices import device_users, inactive_devices
from notifications.models import Notification
from notifications.quiet import quiet_hours_policy
from weave.edge import outside_text
from weave.events import log_event
from weave.leases import ClaimStatement, Clock


class ClaimBuffer:
    """The claims one worker holds: their leases, renewed while rows are out, released when not needed."""

    def __init__(self, *, owner: str, clock: Clock, ttl: float, renew_margin: float) -> None:
        self.owner = owner
        self.clock = clock
        self.ttl = ttl
        self.renew_margin = renew_margin
        self.claims: list[Claim] = []
        self._retry_at = 0.0  # after a renewal cut off from the database: not before then (monotonic)
        # The claim statement by limit, compiled once: every claim of this worker is the same statement.
        self._statements: dict[int, ClaimStatement] = {}

    def claim(self, limit: int) -> tuple[Claim, list[Row]]:
        """Claim up to `limit` due rows in one statement, in due order; the claim is kept alive from now on."""
        # Read the local clock before the claim: the database set expiry = (its now) + ttl after this
        # instant, so `started + ttl` never overestimates how long the lease lasts.
        started = self.clock.monotonic()
        statement = self._statements.get(limit)
        if statement is None:
            statement = self._statements[limit] = Notification.objects.due(self.clock).claim_statement(
                owner=self.owner, ttl=timedelta(seconds=self.ttl), limit=limit, fields=ROW_FIELDS, clock=self.clock
            )
        batch, values = statement.run()
        database_at = None if batch.expires_at is None else batch.expires_at - timedelta(seconds=self.ttl)
        claim = Claim(batch=batch, deadline=started + self.ttl, database_at=database_at, local_at=started)
        # RETURNING keeps no order: send in due order, as the claim chose them.
        values.sort(key=lambda v: (v["next_attempt_at"], v["pk"]))
        rows = [
            Row(
                pk=v["pk"],
                claim=claim,
                fence=batch.fences[v["pk"]],
                attempts=v["attempts"],
                message=message_from(v),
                device_id=v.get("device"),
            )
            for v in values
        ]
        claim.open = len(rows)
        # One read per claim, and only when its rows name devices: which of them were deactivated.
        claim.inactive = inactive_devices({row.device_id for row in rows if row.device_id is not None})
        claim.quiet = quiet_hours_policy()
        if claim.quiet is not None:
            # One more read, only for a site with quiet hours: whose devices these are.
            claim.users = device_users({row.device_id for row in rows if row.device_id is not None})
        for row in rows:
            log_event(logger, "claim", job=JOB, id=row.pk, owner=self.owner, fence=row.fence, level=logging.DEBUG)
        self.adopt(claim)
        return claim, rows

    def adopt(self, claim: Claim) -> None:
        """Keep `claim` alive from now on (a claim made earlier by `PushWorker.claim()`)."""
        if claim.open and claim not in self.claims:
            self.claims.append(claim)

    def forget_done(self) -> None:
        """Stop watching claims whose every row is finished, released or skipped."""
        self.claims = [claim for claim in self.claims if claim.open]

    def keep_alive(self) -> None:
        """Renew each claim's lease when it is close to running out (one statement per claim)."""
        now = self.clock.monotonic()
        if now < self._retry_at:
            return
        for claim in self.claims:
            if not claim.batch.fences or claim.deadline - now > self.renew_margin:
                continue
            started = self.clock.monotonic()
            try:
                lost = Notification.objects.renew_batch(claim.batch, ttl=timedelta(seconds=self.ttl), clock=self.clock)
            except DatabaseError as error:
                if not reconnect_if_cut(error):
                    raise
                # Cut off: the leases stand until they expire (each finish is judged by its own lease
                # then); the next try goes out on a fresh connection, soon, not at every turn.
                self._retry_at = now + self.renew_margin / 3
                log_event(logger, "renewal_retry", job=JOB, id="-", owner=self.owner, reason=outside_text(str(error)))
                return
            claim.deadline = started + self.ttl
            for pk in lost:
                log_lost(pk, self.owner, "lease renewal refused")

    def seconds_to_renewal(self) -> float:
        """How long the worker may wait before a claim needs renewing (1 s when nothing needs it)."""
        now = self.clock.monotonic()
        return min((c.deadline - self.renew_margin - now for c in self.claims if c.batch.fences), default=1.0)

    def release(self, rows: Iterable[Row], reason: str, **fields: Any) -> int:
        """Hand back rows never sent, through the guard, without using an attempt; return how many were ours.

        `fields` are written with the release (an open breaker's `next_attempt_at` and `last_error`); without
        them a row is claimable at once with its due time unchanged.
        """
        by_claim: dict[int, tuple[Claim, list[Row]]] = {}
        for row in rows:
            by_claim.setdefault(id(row.claim), (row.claim, []))[1].append(row)
        released = 0
        for claim, mine in by_claim.values():
            ours = [row for row in mine if row.pk in claim.batch]
            released += Notification.objects.release_batch(
                claim.batch, [row.pk for row in ours], clock=self.clock, **fields
            )
            for _ in mine:
                claim.settle("released")
            for row in ours:
                log_event(logger, "released", job=JOB, id=row.pk, owner=self.owner, fence=row.fence, reason=reason)
        return released

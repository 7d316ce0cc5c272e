"""Bench-only: Weave's delivery path with the guard conditions removed. Never used in production code.

It exists to price the guards (issue 6, "cost of fencing"). The claim stays as it is, so the
rows are still split between workers and the provider sees the same traffic; what goes is the
`owner = me AND fence = my_fence AND lease_expires_at > db_now()` part of every later write:

- finishing a row is a plain `UPDATE ... WHERE pk = %s` (a copy of `PushWorker._finish`, with
  `Notification.objects.release(lease, ...)` replaced by `.filter(pk=...).update(...)`);
- renewing the batch is a plain `UPDATE ... WHERE pk IN (...)`.

Everything else (sending, grouping answers into one transaction, attempt rows, budget) is the app's
own code, inherited. Keep `_finish` in step with `notifications.delivery.PushWorker._finish`.
"""

from datetime import timedelta
from typing import Any

from django.db import transaction
from notifications.delivery import DeliveryReport, PushWorker, _InFlight
from notifications.providers import SendResult

from notifications.models import DeliveryAttempt, Notification
from weave.events import log_event
from weave.leases import BatchLease


class UnfencedPushWorker(PushWorker):
    """`PushWorker` whose writes after the claim carry no guard."""

    def _keep_alive(self, batch: BatchLease) -> None:
        if not batch.fences or self.budget_spent:
            return
        if self._deadline - self.clock.monotonic() > self.renew_margin:
            return
        started = self.clock.monotonic()
        Notification.objects.filter(pk__in=list(batch.fences)).update(
            lease_expires_at=self.clock.now(timedelta(seconds=self.ttl))
        )
        self._deadline = started + self.ttl

    def _finish(self, batch: BatchLease, group: list[tuple[_InFlight, SendResult]], report: DeliveryReport) -> None:
        attempts: list[DeliveryAttempt] = []
        events: list[tuple[str, _InFlight, str]] = []
        with transaction.atomic():
            for item, result in group:
                self.breaker.record(result)
                fields, event = self._next_state(item, result)
                # The one difference: no owner/fence/expiry condition, so a late answer would overwrite.
                Notification.objects.filter(pk=item.pk).update(owner=None, lease_expires_at=None, **fields)
                batch.drop(item.pk)
                attempts.append(self._attempt(item, result, result.outcome, fields.get("last_error", result.reason)))
                events.append((event, item, fields.get("last_error", "")))
                setattr(report, result.outcome.value, getattr(report, result.outcome.value) + 1)
                report.failed += fields.get("status") == Notification.Status.FAILED
            DeliveryAttempt.objects.bulk_create(attempts)
        for event, item, reason in events:
            log_event(
                self._logger,
                event,
                job="notification",
                id=item.pk,
                owner=item.lease.owner,
                fence=item.lease.fence,
                reason=reason,
            )

    @property
    def _logger(self) -> Any:
        from notifications.delivery import logger

        return logger


def drain() -> dict[str, Any]:
    """The django-q2 entry point of the unfenced variant (bench only)."""
    worker = UnfencedPushWorker()
    try:
        return worker.run().as_dict()
    finally:
        worker.close()

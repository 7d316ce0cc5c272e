"""Bench-only prototype of a change recommended to the notifications app: finish a group in one statement.

The profile (report, "Profile of the hot path") shows a worker spending most of its time in
`PushWorker._finish`, one guarded `UPDATE` per answer. Each of those statements is a round trip
during which the calling thread gives up the GIL, and getting it back from twenty sending threads
costs up to `sys.getswitchinterval()` (5 ms) per statement. So the fix is fewer statements, not
faster ones: every delivered answer of a group is finished by ONE guarded statement,

    UPDATE weave_notifications_notification AS n SET status = 'delivered', ... , owner = NULL, lease_expires_at = NULL
    FROM (VALUES (id, fence, attempts, message_id, note), ...) AS v(...)
    WHERE n.id = v.id AND n.owner = %s AND n.fence = v.fence AND n.lease_expires_at > clock_timestamp()
    RETURNING n.id

with exactly the guard of `LeaseQuerySet.guarded_update`, per row (its own fence). Rows it did not
return lost their lease: they go through the app's own per-row path, which refuses them again and
records `lease_lost` with the reason. Answers other than `delivered` take the app's path unchanged.
The app now does the same through the ORM (`LeaseQuerySet.release_many`, one `CASE` per field, every
answer of the group); this raw form stays as a measured comparison of what the ORM's statement costs.
"""

from typing import Any

from django.db import connection, transaction

from notifications.delivery import DeliveryReport, PushWorker, _InFlight, logger
from notifications.models import DeliveryAttempt, Notification
from notifications.providers import Outcome, SendResult
from weave.events import log_event
from weave.leases import BatchLease


class GroupFinishPushWorker(PushWorker):
    """`PushWorker` that finishes all delivered answers of a group with one guarded statement."""

    def _finish(self, batch: BatchLease, group: list[tuple[_InFlight, SendResult]], report: DeliveryReport) -> None:
        delivered = [(item, result) for item, result in group if result.outcome == Outcome.DELIVERED]
        others = [(item, result) for item, result in group if result.outcome != Outcome.DELIVERED]
        if others:
            super()._finish(batch, others, report)
        if not delivered:
            return
        with transaction.atomic():
            landed = self._release_delivered(batch.owner, delivered)
            attempts = []
            for item, result in delivered:
                if item.pk not in landed:
                    continue
                self.breaker.record(result, self.owner)
                batch.drop(item.pk)
                attempts.append(self._attempt(item, result, result.outcome, result.reason))
                report.delivered += 1
            DeliveryAttempt.objects.bulk_create(attempts)
        for item, _ in delivered:
            if item.pk in landed:
                log_event(
                    logger, "delivered", job="notification", id=item.pk, owner=item.lease.owner, fence=item.lease.fence
                )
        lost = [(item, result) for item, result in delivered if item.pk not in landed]
        if lost:
            super()._finish(batch, lost, report)  # refused again, recorded as lease_lost with the reason

    def _release_delivered(self, owner: str, delivered: list[tuple[_InFlight, SendResult]]) -> set[Any]:
        table = connection.ops.quote_name(Notification._meta.db_table)
        rows = ", ".join(["(%s::bigint, %s::bigint, %s::integer, %s, %s)"] * len(delivered))
        params: list[Any] = []
        for item, result in delivered:
            params += [item.pk, item.lease.fence, item.attempts + 1, result.provider_message_id, result.reason]
        sql = (
            f"UPDATE {table} AS n SET status = %s, attempts = v.attempts, delivered_at = clock_timestamp(), "
            "provider_message_id = v.message_id, last_error = v.note, owner = NULL, lease_expires_at = NULL "
            f"FROM (VALUES {rows}) AS v(id, fence, attempts, message_id, note) "
            "WHERE n.id = v.id AND n.owner = %s AND n.fence = v.fence AND n.lease_expires_at > clock_timestamp() "
            "RETURNING n.id"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [Notification.Status.DELIVERED, *params, owner])
            return {pk for (pk,) in cursor.fetchall()}


def drain() -> dict[str, Any]:
    """The django-q2 entry point of the prototype (bench only)."""
    worker = GroupFinishPushWorker()
    try:
        return worker.run().as_dict()
    finally:
        worker.close()

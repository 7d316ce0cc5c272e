"""The story of one notification: its sends, their outcomes, lease takeovers and who holds it now."""

from notifications.models import DeliveryAttempt, Notification
from weave.leases import Clock, default_clock
from weave.timeline import Timeline, clock_time, holder, lateness


def explain_notification(pk: int, *, clock: Clock = default_clock) -> Timeline:
    """Return the timeline of notification `pk`, ending with a plain-language summary."""
    n = Notification.objects.with_lease_state(clock).get(pk=pk)
    attempts = list(DeliveryAttempt.objects.filter(notification_id=pk).order_by("started_at", "pk"))
    t = Timeline(f"Notification {n.pk} to {n.device_token} (key {n.idempotency_key}): {n.status}")
    t.add(n.created_at, "created", f"{n.title!r}, due {clock_time(n.next_attempt_at)}")
    seen: set[tuple[str, int]] = set()
    due = n.next_attempt_at if not attempts else None  # the due time the next send is measured against
    for a in attempts:
        if (a.owner, a.fence) not in seen:
            seen.add((a.owner, a.fence))
            t.add(a.started_at, "claim", f"fence {a.fence} held by {a.owner} (time of its send)")
        t.add(a.started_at, "send", f"fence {a.fence} sent key {n.idempotency_key}{lateness(a.started_at, due)}")
        status = f"HTTP {a.http_status}" if a.http_status else "no HTTP answer"
        text = f"fence {a.fence}: {status}, {a.latency_ms or 0} ms. {a.reason}".strip()
        if a.retry_due_at is not None:
            text += f" Retry due at {clock_time(a.retry_due_at)} (database time)."
            due = a.retry_due_at
        t.add(a.finished_at, a.outcome, text)
    if n.status == Notification.Status.PENDING and n.next_attempt_at is not None and attempts:
        t.add(None, "due", f"next send due at {clock_time(n.next_attempt_at)} (database time)")
    t.add(None, "holder", holder(n))
    t.summary = _summary(n, attempts)
    return t


def _summary(n: Notification, attempts: list[DeliveryAttempt]) -> str:
    if not attempts:
        return f"Notification {n.pk} has not been sent yet; it is {n.status}."
    parts = []
    for number, a in enumerate(attempts, 1):
        waited = f"{(a.latency_ms or 0) / 1000:.1f} s"
        if a.outcome == DeliveryAttempt.Outcome.LEASE_LOST:
            later = [b.fence for b in attempts if b.fence > a.fence]
            taker = min(later) if later else n.fence
            parts.append(
                f"attempt {number} (fence {a.fence}) lost its lease to fence {taker} while waiting {waited} on the "
                f"provider, and its answer was refused at {clock_time(a.finished_at)}"
            )
        elif a.outcome == DeliveryAttempt.Outcome.DELIVERED:
            parts.append(f"fence {a.fence} delivered it at {clock_time(a.finished_at)}")
        elif a.outcome == DeliveryAttempt.Outcome.UNKNOWN:
            parts.append(
                f"attempt {number} (fence {a.fence}) got no answer after {waited}, so the provider may have it"
            )
        else:
            parts.append(f"attempt {number} (fence {a.fence}) was {a.outcome} at {clock_time(a.finished_at)}")
    sends = len(attempts)
    times = {1: "once", 2: "twice"}.get(sends, f"{sends} times")
    text = "; ".join(parts)
    return (
        f"{text[0].upper()}{text[1:]}. Weave sent key {n.idempotency_key} to the provider {times}; "
        f"the notification is {n.status}{': ' + n.last_error.splitlines()[0] if n.last_error else ''}."
    )

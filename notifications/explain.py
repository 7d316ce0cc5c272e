"""The story of one notification: its sends, their outcomes, lease takeovers and who holds it now."""

from datetime import datetime

from notifications.models import DeliveryAttempt, Notification
from notifications.quiet import DEFERRAL_PREFIX
from notifications.token_display import mask_token
from weave.leases import Clock, default_clock
from weave.operations import Timeline, add_operator_events, clock_time, fences_accounted, holder, lateness


def explain_notification(pk: int, *, clock: Clock = default_clock) -> Timeline:
    """Return the timeline of notification `pk`, ending with a plain-language summary."""
    n = Notification.objects.with_lease_state(clock).get(pk=pk)
    attempts = list(DeliveryAttempt.objects.filter(notification_id=pk).order_by("started_at", "pk"))
    platform = n.device.platform if n.device_id and n.device else ""
    # The token masked as the admin shows it: it is the address of someone's phone.
    t = Timeline(f"Notification {n.pk} to {mask_token(n.device_token, platform)} (key {n.idempotency_key}): {n.status}")
    expiry = f", expires {clock_time(n.expires_at)}" if n.expires_at else ""
    device = f", device {n.device_id} on backend {n.backend!r}" if n.device_id else ""
    # Due time on the created line only before any send: a later retry moves next_attempt_at.
    due_now = f", due {clock_time(n.next_attempt_at)}" if not attempts and n.next_attempt_at else ""
    t.add(n.created_at, "created", f"{n.title!r}{due_now}{expiry}{device}")
    seen: set[tuple[str, int]] = set()
    due_at = None  # the due time the next send is measured against (the previous attempt's retry_at)
    for a in attempts:
        if (a.owner, a.fence) not in seen:
            seen.add((a.owner, a.fence))
            t.add(a.started_at, "claim", f"fence {a.fence} held by {a.owner} (time of its send)")
        _add_attempt(t, n, a, due_at)
        if a.retry_at is not None:
            due_at = a.retry_at
    _add_due(t, n, attempts)
    add_operator_events(t, Notification, pk)
    t.add(None, "holder", holder(n))
    claims: dict[int, str] = {}
    for a in attempts:
        claims.setdefault(a.fence, f"claimed by {a.owner} ({a.outcome})")
    t.summary = f"{_summary(n, attempts)} {fences_accounted(n.fence, claims)}"
    return t


def answer(a: DeliveryAttempt) -> str:
    """What came back for one send, truthfully: the HTTP status and the measured wait, or how long it went
    unanswered (from the send to its ending, by the database clock) when the backend measured nothing."""
    status = f"HTTP {a.http_status}" if a.http_status else "no HTTP answer"
    if a.latency_ms is not None:
        return f"{status}, {a.latency_ms} ms"
    if a.finished_at is None:
        return status
    return f"{status} in {waited(a)}"


def waited(a: DeliveryAttempt) -> str:
    """How long one send waited: the backend's measure, else the database time from the send to its ending."""
    if a.latency_ms is not None:
        return f"{a.latency_ms / 1000:.1f} s"
    if a.finished_at is None:
        return "an unknown time"
    return f"{max(0.0, (a.finished_at - a.started_at).total_seconds()):.1f} s"


def _add_attempt(t: Timeline, n: Notification, a: DeliveryAttempt, due_at: datetime | None) -> None:
    if a.outcome == DeliveryAttempt.Outcome.NOT_SENT:
        t.add(a.finished_at, a.outcome, f"fence {a.fence} ended it without sending. {a.reason}".strip())
        return
    t.add(a.started_at, "send", f"fence {a.fence} sent key {n.idempotency_key}{lateness(a.started_at, due_at)}")
    which = f" (attempt {a.number})" if a.number else ""
    due = f" Next try due {clock_time(a.retry_at)} (database time)." if a.retry_at else ""
    t.add(a.finished_at, a.outcome, f"fence {a.fence}: {answer(a)}{which}. {a.reason}{due}".strip())


def _add_due(t: Timeline, n: Notification, attempts: list[DeliveryAttempt]) -> None:
    if n.status != Notification.Status.PENDING:
        return
    if n.last_error.startswith(DEFERRAL_PREFIX):
        # Quiet hours moved the due time (at creation, or when a worker claimed it): say from when to when.
        t.add(None, "deferred", f"{n.last_error} Due at {clock_time(n.next_attempt_at)} (database time).")
    elif n.next_attempt_at is not None and attempts:
        t.add(None, "due", f"next send due at {clock_time(n.next_attempt_at)} (database time)")


def _summary(n: Notification, attempts: list[DeliveryAttempt]) -> str:
    if not attempts:
        return _unsent_summary(n)
    text = "; ".join(_ending(n, attempts, number, a) for number, a in enumerate(attempts, 1))
    sends = sum(1 for a in attempts if a.outcome != DeliveryAttempt.Outcome.NOT_SENT)
    times = {1: "once", 2: "twice"}.get(sends, f"{sends} times")
    sent = f"sent key {n.idempotency_key} to the provider {times}" if sends else "never sent it to the provider"
    why = n.last_error.splitlines()[0].rstrip(".") if n.last_error else ""
    return f"{text[0].upper()}{text[1:]}. Weave {sent}; the notification is {n.status}{': ' + why if why else ''}."


def _unsent_summary(n: Notification) -> str:
    if n.status != Notification.Status.PENDING and n.last_error:
        # Ended before any worker took it (a device deactivated or handed over, a cancel): say why.
        why = n.last_error.splitlines()[0].rstrip(".")
        return f"Notification {n.pk} was never sent; it is {n.status}: {why}."
    # A pending row's reason before any send: a deferral (quiet hours).
    why = f" {n.last_error}" if n.last_error else ""
    return f"Notification {n.pk} has not been sent yet; it is {n.status}.{why}"


def _ending(n: Notification, attempts: list[DeliveryAttempt], number: int, a: DeliveryAttempt) -> str:
    """How one attempt ended, in a clause of the summary."""
    at = clock_time(a.finished_at)
    if a.outcome == DeliveryAttempt.Outcome.LEASE_LOST:
        later = [b.fence for b in attempts if b.fence > a.fence]
        taker = min(later) if later else n.fence
        return (
            f"attempt {number} (fence {a.fence}) lost its lease to fence {taker} while waiting {waited(a)} on the "
            f"provider, and its answer was refused at {at}"
        )
    if a.outcome == DeliveryAttempt.Outcome.NOT_SENT:
        return f"fence {a.fence} ended it without sending at {at}"
    if a.outcome == DeliveryAttempt.Outcome.DELIVERED:
        return f"fence {a.fence} delivered it at {at}"
    if a.outcome == DeliveryAttempt.Outcome.UNKNOWN:
        return f"attempt {number} (fence {a.fence}) got no answer in {waited(a)}, so the provider may have it"
    return f"attempt {number} (fence {a.fence}) was {a.outcome} at {at}"

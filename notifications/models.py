"""Notifications and their delivery receipts."""

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Case, F, Min, Q, When

from weave.leases import Clock, LeasedModel, LeaseQuerySet, default_clock
from weave.models import DatabaseNow, JobModel


class NotificationQuerySet(LeaseQuerySet["Notification"]):
    def pending(self) -> "NotificationQuerySet":
        return self.filter(status=Notification.Status.PENDING)

    def due(self, clock: Clock = default_clock) -> "NotificationQuerySet":
        """Pending rows whose next attempt is due by the database clock, oldest first."""
        return self.pending().filter(next_attempt_at__lte=clock.now()).order_by("next_attempt_at", "pk")

    def claimable(self, clock: Clock = default_clock) -> "NotificationQuerySet":
        """Due rows that nobody holds under a live lease."""
        return self.due(clock).free_or_expired(clock)

    def next_due_at(self) -> datetime | None:
        """The earliest database time at which a pending row becomes claimable, or None if none is pending.

        That is its due time, or, for a row held under a lease ending later, the lease's end (if the
        holder dies, the row is claimable then). The due-time watcher (`weave.wake`) sleeps until it.
        """
        claimable_at = Case(
            When(owner__isnull=False, lease_expires_at__gt=F("next_attempt_at"), then=F("lease_expires_at")),
            default=F("next_attempt_at"),
        )
        at: datetime | None = self.pending().filter(next_attempt_at__isnull=False).aggregate(at=Min(claimable_at))["at"]
        return at


# What the provider is sent. Once a worker has claimed the row, this is the record of what went out.
CONTENT_FIELDS = (
    "device",
    "device_token",
    "backend",
    "title",
    "body",
    "data",
    "options",
    "expires_at",
    "priority",
    "collapse_key",
)


class ContentLocked(Exception):
    """The notification was claimed (or finished): its content is the record of what was sent."""


class DeviceQuerySet(models.QuerySet["Device"]):
    def active(self) -> "DeviceQuerySet":
        return self.filter(active=True)


class Device(models.Model):
    """One app install or browser subscription that can receive pushes through one backend."""

    class Platform(models.TextChoices):
        ANDROID = "android"
        IOS = "ios"
        WEB = "web"
        OTHER = "other"

    # Nullable: a device may register before its user logs in, and a user's deletion keeps nothing.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="push_devices"
    )
    backend = models.CharField(max_length=50, help_text='The alias in WEAVE["PUSH_BACKENDS"] that reaches it.')
    platform = models.CharField(max_length=20, choices=Platform.choices, blank=True)
    # Long enough for a Web Push subscription (endpoint URL plus keys, as JSON).
    token = models.CharField(max_length=2048)
    active = models.BooleanField(default=True)
    # The database's clock, as `last_used_at`: the device cap ranks devices by one of the two.
    created_at = models.DateTimeField(db_default=DatabaseNow(), editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True)
    deactivated_at = models.DateTimeField(null=True, blank=True)
    deactivation_reason = models.TextField(blank=True)
    # When the token was last registered by another user than the one it belonged to (database clock):
    # the previous owner's queued notifications ended unsent at that moment.
    owner_changed_at = models.DateTimeField(null=True, blank=True)

    objects = DeviceQuerySet.as_manager()

    class Meta:
        permissions = [("send_test_notification", "Can send a test notification to a device")]
        constraints = [models.UniqueConstraint(fields=["backend", "token"], name="device_token_unique_per_backend")]
        indexes = [models.Index(fields=["user", "active"], name="device_user_active_idx")]

    def __str__(self) -> str:
        # No part of the token: it is the address of someone's phone, and a title or a link label shows this.
        state = "" if self.active else " (inactive)"
        kind = {"android": "Android", "ios": "iOS", "web": "Web"}.get(self.platform, "")
        return f"{kind + ' d' if kind else 'D'}evice {self.pk} via {self.backend}{state}"


class Notification(LeasedModel):
    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"
        CANCELLED = "cancelled"
        # Its expires_at passed before it could be sent: never sent, never retried.
        EXPIRED = "expired"

    class Priority(models.TextChoices):
        NORMAL = "normal"
        HIGH = "high"

    # Set when the row was made for a registered device; a device's deletion keeps the history.
    device = models.ForeignKey(Device, null=True, blank=True, on_delete=models.SET_NULL, related_name="notifications")
    # The token the row is sent to (the device's token, copied, for rows made for a device).
    device_token = models.CharField(max_length=2048)
    # The alias in WEAVE["PUSH_BACKENDS"] that sends this row ("default": the webhook from PUSH_URL).
    backend = models.CharField(max_length=50, default="default")
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    # Checked display options (notifications.content): subtitle, badge, sound, image, per-platform overrides.
    options = models.JSONField(default=dict, blank=True)
    # Sent as the provider's Idempotency-Key on every attempt, so a retry after an ambiguous
    # timeout cannot deliver the message twice at a provider that honours it.
    idempotency_key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # After this instant the message is never sent (it ends `expired`); the remaining TTL goes to the provider.
    expires_at = models.DateTimeField(null=True, blank=True)
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.NORMAL)
    # Same key => the device replaces the earlier message; empty: the idempotency key is used.
    collapse_key = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    provider_message_id = models.CharField(max_length=200, blank=True)
    last_error = models.TextField(blank=True)
    # The database's clock, as every time of its story (`weave_explain`): the services give the clock's
    # "now" (the INSERT returns it); a row made any other way gets the column's default.
    created_at = models.DateTimeField(db_default=DatabaseNow(), editable=False)
    # When the row reached its final status, by the database clock; retention counts from it. Cleared
    # when an operator's retry makes a failed row pending again.
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The lease fields' own, without the base's plain index: `notif_held_idx` (held rows only) is the
    # one every reader uses, and a second index on the column is one more write per insert and claim.
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = NotificationQuerySet.as_manager()  # type: ignore[misc]  # replaces the abstract base's manager

    class Meta:
        permissions = [("manage_delivery", "Can retry or cancel notification delivery")]
        indexes = [
            # The claim query: pending rows by due time.
            models.Index(fields=["status", "next_attempt_at"], name="notif_due_idx"),
            # The console's lease counts: held rows only, a handful even on a table of millions.
            models.Index(fields=["lease_expires_at"], condition=Q(owner__isnull=False), name="notif_held_idx"),
            # The purge's pick: finished rows by finish time (a pending row has none and is not in it).
            models.Index(
                fields=["finished_at", "id"], condition=Q(finished_at__isnull=False), name="notif_finished_idx"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "delivered", "failed", "cancelled", "expired"]),
                name="notif_status_valid",
            ),
        ]

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; content changes to an existing row are refused here (use `notification_edit`)."""
        update_fields = kwargs.get("update_fields")
        # A full-row save is refused by LeasedModel.save (it would write the lease fields too).
        if not self._state.adding and update_fields is not None and set(CONTENT_FIELDS) & set(update_fields):
            raise ContentLocked(
                "A notification's content is changed only by notification_edit, which refuses once it was claimed."
            )
        super().save(*args, **kwargs)

    def __str__(self) -> str:
        # A Web Push subscription is JSON: its first characters say nothing; an app token's start is enough.
        token = self.device_token or ""
        to = "a Web Push subscription" if token.lstrip().startswith("{") else f"{token[:6]}…"
        return f"Notification {self.pk} to {to} ({self.status})"


class DeliveryAttempt(models.Model):
    """The receipt of one send attempt, written whatever its outcome."""

    class Outcome(models.TextChoices):
        DELIVERED = "delivered"
        TEMPORARY = "temporary"
        PERMANENT = "permanent"
        # Timed out or the connection dropped after the request went out: the provider may
        # have delivered it. Retried with the same idempotency key.
        UNKNOWN = "unknown"
        # The guard refused our finish: another worker holds the row now. Nothing else written.
        LEASE_LOST = "lease_lost"
        # Ended without a send (expired, or its device deactivated): the receipt of that guarded finish,
        # so the row's timeline says who ended it, at which fence and when. Uses no attempt.
        NOT_SENT = "not_sent"

    # No index of its own: `notif_attempt_idx` (notification, started_at) starts with it and serves every lookup.
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="delivery_attempts", db_index=False
    )
    owner = models.CharField(max_length=100)
    fence = models.BigIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    # The provider's answer in words (sanitized); the row's `last_error` adds what happens next.
    reason = models.TextField(blank=True)
    # Which of the notification's attempts this was (1-based); null for `lease_lost`, which used none.
    number = models.PositiveIntegerField(null=True, blank=True)
    # When the next try was made due (database clock), for an answer that is retried; else null.
    retry_at = models.DateTimeField(null=True, blank=True)
    # The backend alias it was sent through (the notification's), kept on the receipt so the console's
    # latency by backend reads the attempts alone. "" on receipts written before the field existed:
    # those are read through their notification (`notifications.console.backend_expression`).
    backend = models.CharField(max_length=50, blank=True, default="", db_default="")

    class Meta:
        ordering = ["started_at", "pk"]
        indexes = [
            models.Index(fields=["notification", "started_at"], name="notif_attempt_idx"),
            # The console's windows (last hour, last day) and the metrics' running counts read recent
            # attempts by finish time; outcome and latency ride along so the index alone can answer
            # (a composite key, not INCLUDE: SQLite, the demo database, has no INCLUDE).
            models.Index(fields=["finished_at", "outcome", "latency_ms"], name="notif_attempt_finished_idx"),
            # Receipts written before they carried their backend: whether a window holds any is a range
            # of this (new receipts never enter it), so the console looks notifications up only then.
            models.Index(fields=["finished_at"], condition=models.Q(backend=""), name="notif_attempt_unlabelled_idx"),
        ]

    def __str__(self) -> str:
        return f"Attempt on notification {self.notification_id} at fence {self.fence}: {self.outcome}"


class BreakerOpening(models.Model):
    """One opening of a push worker's circuit breaker, kept so operators see it after the worker is gone."""

    opened_at = models.DateTimeField(help_text="Database clock.")
    owner = models.CharField(max_length=100)
    reason = models.TextField()

    class Meta:
        ordering = ["-opened_at", "-pk"]
        indexes = [models.Index(fields=["opened_at"], name="notif_breaker_opened_idx")]

    def __str__(self) -> str:
        return f"Breaker opened by {self.owner}"


class TopicSubscription(JobModel):
    """One Instance ID batch call: subscribe (or unsubscribe) up to 1,000 FCM tokens to (from) one topic.

    A fenced job of the core's runner (`weave.jobs`, job type "fcm_topic"): claimed by the database
    clock, its call made under a heartbeat, its per-token results kept in the step's receipt, and
    devices whose tokens IID called dead deactivated in the same guarded transaction.
    """

    class Action(models.TextChoices):
        SUBSCRIBE = "subscribe"
        UNSUBSCRIBE = "unsubscribe"

    backend = models.CharField(max_length=50, help_text='The FCM alias in WEAVE["PUSH_BACKENDS"].')
    topic = models.CharField(max_length=900)
    action = models.CharField(max_length=12, choices=Action.choices)
    # The registration tokens of this batch (at most 1,000, IID's limit), in the order IID answers them.
    tokens = models.JSONField(default=list)

    class Meta(JobModel.Meta):
        verbose_name = "FCM topic subscription"

    def __str__(self) -> str:
        tokens = "1 token" if len(self.tokens) == 1 else f"{len(self.tokens)} tokens"
        return f"{self.action} {tokens} to {self.topic!r} via {self.backend}"


class TopicIntent(models.Model):
    """What the site last asked for one FCM registration and one topic: subscribed or not, with a version.

    Every `topic_subscribe` / `topic_unsubscribe` call (and a device's deactivation) bumps `version`
    and sets `subscribed`; a topic job sends whatever the row says when it runs, then marks
    `applied_version` with one guarded update that matches only if `version` did not move during the
    call. When it moved, the job sends the newer wish again, so the last request wins, whatever order
    the jobs and their retries run in.
    """

    backend = models.CharField(max_length=50, help_text='The FCM alias in WEAVE["PUSH_BACKENDS"].')
    # The registration as a device stores it: an FCM registration token, or "fid:" and a Firebase installation ID.
    registration = models.CharField(max_length=1024)
    topic = models.CharField(max_length=900)
    subscribed = models.BooleanField()
    version = models.BigIntegerField(default=1)
    applied_version = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")
    applied_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")
    # What FCM answered for the applied version: "" when applied, else its code (NOT_FOUND, ...).
    last_result = models.CharField(max_length=100, blank=True)

    class Meta:
        verbose_name = "FCM topic intent"
        constraints = [
            models.UniqueConstraint(fields=["backend", "registration", "topic"], name="topic_intent_unique"),
        ]

    def __str__(self) -> str:
        wish = "subscribed to" if self.subscribed else "unsubscribed from"
        done = "applied" if self.applied_version == self.version else "pending"
        return f"Registration {wish} {self.topic!r} via {self.backend} (v{self.version}, {done})"

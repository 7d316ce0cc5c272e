"""Admin for notifications: status, lease state by the database clock, attempt history, guarded actions."""

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest

from notifications.models import DeliveryAttempt, Device, Notification
from notifications.services import (
    BulkResult,
    device_deactivate,
    notification_cancel,
    notification_create,
    notification_retry_now,
)
from weave.admin import LeasedModelAdmin, ReadOnlyAdminMixin


class HasAttemptWithOutcomeFilter(admin.SimpleListFilter):
    """Notifications that have at least one attempt with the chosen outcome."""

    title = "attempt outcome"
    parameter_name = "attempt_outcome"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return DeliveryAttempt.Outcome.choices

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if not self.value():
            return queryset
        attempts = DeliveryAttempt.objects.filter(notification=OuterRef("pk"), outcome=self.value())
        return queryset.filter(Exists(attempts))


class DeliveryAttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    """Receipts are written by the worker only."""

    model = DeliveryAttempt
    extra = 0
    can_delete = False
    fields = readonly_fields = (
        "started_at",
        "finished_at",
        "outcome",
        "http_status",
        "latency_ms",
        "owner",
        "fence",
        "reason",
    )
    ordering = ("started_at", "pk")


@admin.register(Notification)
class NotificationAdmin(LeasedModelAdmin):
    list_display = (
        "id",
        "title",
        "short_token",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "lease_state",
        "owner",
        "fence",
    )
    list_filter = ("status", "backend", HasAttemptWithOutcomeFilter)
    search_fields = ("device_token", "title", "idempotency_key")
    readonly_fields = (
        "device",
        "backend",
        "expires_at",
        "priority",
        "collapse_key",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "provider_message_id",
        "last_error",
        "idempotency_key",
        "lease_state",
        "owner",
        "fence",
        "lease_expires_at",
        "created_at",
        "timeline",
    )
    fieldsets = (
        (None, {"fields": ("device", "backend", "device_token", "title", "body", "data")}),
        ("Expiry and collapse", {"fields": ("expires_at", "priority", "collapse_key")}),
        (
            "Delivery",
            {"fields": ("status", "attempts", "next_attempt_at", "delivered_at", "provider_message_id", "last_error")},
        ),
        ("Lease (written by workers only)", {"fields": ("lease_state", "owner", "fence", "lease_expires_at")}),
        ("Identity", {"fields": ("idempotency_key", "created_at")}),
        ("Timeline", {"fields": ("timeline",)}),
    )
    inlines = (DeliveryAttemptInline,)
    actions = ("retry_now", "cancel")
    explain_kind = "notification"

    @admin.display(description="device token")
    def short_token(self, obj: Notification) -> str:
        return obj.device_token if len(obj.device_token) <= 16 else f"{obj.device_token[:16]}…"

    def has_manage_delivery_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("weave_notifications.manage_delivery")

    @admin.action(description="Retry now", permissions=["manage_delivery"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        result = notification_retry_now(
            notification_ids=list(queryset.values_list("pk", flat=True)), requested_by=request.user.get_username()
        )
        self._report(request, result, "due now")

    @admin.action(description="Cancel", permissions=["manage_delivery"])
    def cancel(self, request: HttpRequest, queryset: QuerySet) -> None:
        result = notification_cancel(
            notification_ids=list(queryset.values_list("pk", flat=True)), requested_by=request.user.get_username()
        )
        self._report(request, result, "cancelled")

    def _report(self, request: HttpRequest, result: BulkResult, done: str) -> None:
        if result.changed:
            self.message_user(request, f"{len(result.changed)} notification(s) {done}: {_ids(result.changed)}.")
        if result.busy:
            self.message_user(
                request,
                f"{len(result.busy)} notification(s) left alone because a worker holds them right now: "
                f"{_ids(result.busy)}. Try again when the lease is released.",
                level=messages.WARNING,
            )
        if result.skipped:
            self.message_user(
                request,
                f"{len(result.skipped)} notification(s) not in a state this action applies to: {_ids(result.skipped)}.",
                level=messages.WARNING,
            )


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "notification", "outcome", "http_status", "latency_ms", "owner", "fence", "started_at")
    list_filter = ("outcome",)
    search_fields = ("reason", "owner")
    list_select_related = ("notification",)


def _ids(pks: list[int]) -> str:
    shown = ", ".join(str(pk) for pk in pks[:20])
    return shown + (f" and {len(pks) - 20} more" if len(pks) > 20 else "")


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ("id", "user", "backend", "platform", "short_token", "active", "created_at", "deactivated_at")
    list_filter = ("active", "backend", "platform")
    search_fields = ("token", "user__username", "user__email")
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    readonly_fields = ("created_at", "last_used_at", "active", "deactivated_at", "deactivation_reason")
    fields = ("user", "backend", "platform", "token", *readonly_fields)
    actions = ("send_test_notification", "deactivate")

    @admin.display(description="token")
    def short_token(self, obj: Device) -> str:
        return obj.token if len(obj.token) <= 24 else f"{obj.token[:24]}…"

    def has_send_test_notification_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("weave_notifications.send_test_notification")

    @admin.action(description="Send test notification", permissions=["send_test_notification"])
    def send_test_notification(self, request: HttpRequest, queryset: QuerySet) -> None:
        sent, refused = [], []
        who = request.user.get_username()
        for device in queryset.order_by("pk"):
            try:
                notification = notification_create(
                    device=device,
                    title="Test notification",
                    body=f"Sent from the admin by {who}.",
                    ttl=3600,  # a test that arrives tomorrow is noise
                )
            except ValidationError as exc:
                refused.append(f"{device.pk} ({'; '.join(exc.messages)})")
                continue
            sent.append(notification.pk)
            self.log_change(request, device, f"Sent test notification {notification.pk}.")
        if sent:
            self.message_user(request, f"{len(sent)} test notification(s) queued: {_ids(sent)}.")
        if refused:
            self.message_user(
                request, f"Not sent to {len(refused)} device(s): {', '.join(refused[:10])}.", level=messages.WARNING
            )

    @admin.action(description="Deactivate (fails their queued notifications)", permissions=["change"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet) -> None:
        who = request.user.get_username()
        done = []
        for device in queryset.filter(active=True).order_by("pk"):
            device_deactivate(device=device, reason=f"Deactivated in the admin by {who}.")
            self.log_change(request, device, "Deactivated.")
            done.append(device.pk)
        self.message_user(request, f"{len(done)} device(s) deactivated: {_ids(done)}." if done else "No active device.")

"""Admin for notifications: status, lease state by the database clock, attempt history, guarded actions."""

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db.models import DateTimeField, Exists, F, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Least
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html, format_html_join

from notifications.models import (
    BreakerOpening,
    DeliveryAttempt,
    Device,
    Notification,
    NotificationQuerySet,
    TopicSubscription,
)
from notifications.services import (
    BulkResult,
    ContentLocked,
    device_deactivate,
    notification_cancel,
    notification_check,
    notification_create,
    notification_edit,
    notification_retry_now,
)
from notifications.token_display import PLATFORM_NAMES, mask_token
from weave.leases import default_clock
from weave.operations import (
    ActionRule,
    ActionsWhereTheyApply,
    JobAdminMixin,
    LeasedModelAdmin,
    LeaseStateFilter,
    OperatorModelAdmin,
    ReadOnlyAdminMixin,
    ReadOnlyTabularInline,
    admin_link_to,
    choice_filter,
    clipped,
    clipped_column,
    key_values,
    link_column,
    linked_ids,
    permission_check,
    reason_column,
    said_once,
    shown,
    state_column,
    state_filter,
    state_word,
    timestamp,
    timestamp_column,
    within_filter,
)


def _due(now: bool) -> Callable[[], Q]:
    due = "next_attempt_at__lte" if now else "next_attempt_at__gt"
    return lambda: Q(status=Notification.Status.PENDING, **{due: default_clock.now()})


def _on(platform: str) -> Callable[[], Q]:
    return lambda: Q(platform=platform)


def _has_attempt(outcome: str) -> Callable[[], Exists]:
    return lambda: Exists(DeliveryAttempt.objects.filter(notification=OuterRef("pk"), outcome=outcome))


# Pending notifications whose due time has come by the database clock: the dashboard's backlog.
DueNowFilter = choice_filter(
    "due", "due", {"now": ("due now (backlog)", _due(True)), "later": ("due later", _due(False))}
)
PlatformFilter = choice_filter(
    "platform", "platform", {key: (label, _on(key)) for key, label in PLATFORM_NAMES.items()}
)
# Notifications that have at least one attempt with the chosen outcome.
HasAttemptWithOutcomeFilter = choice_filter(
    "attempt outcome",
    "attempt_outcome",
    {outcome: (state_word(outcome), _has_attempt(outcome)) for outcome in DeliveryAttempt.Outcome.values},
)


class _AttemptColumns(ReadOnlyAdminMixin):
    """What an attempt's page and a notification's inline list of attempts both show (workers write them)."""

    started_at_display = timestamp_column("started_at", "sent at (database clock)")
    finished_at_display = timestamp_column("finished_at", "finished at (database clock)")
    shown_reason = reason_column()  # a page has room for all of it


class DeliveryAttemptInline(_AttemptColumns, ReadOnlyTabularInline):
    model = DeliveryAttempt
    fields = readonly_fields = (
        "started_at_display",
        "finished_at_display",
        "outcome_word",
        "http_status",
        "latency_ms",
        "owner",
        "fence",
        "shown_reason",
    )
    ordering = ("started_at", "pk")
    outcome_word = state_column("outcome", "outcome")


class NotificationForm(forms.ModelForm):
    """The content fields, checked by the same rules as `notification_create`."""

    class Meta:
        model = Notification
        fields = ("device_token", "title", "body", "data")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.instance.pk is not None and not _unclaimed(self.instance.pk):
            raise ValidationError("A worker has claimed this notification: its content can no longer change.")
        if not self.errors:
            editing = self.instance.pk is not None  # then the token and backend are the row's, shown read-only
            try:
                # The form hands over whatever was typed; notification_check types and checks it.
                notification_check(
                    device_token=self.instance.device_token if editing else data.get("device_token", ""),
                    backend=self.instance.backend if editing else None,
                    title=data.get("title", ""),
                    body=data.get("body") or "",
                    data=data.get("data"),
                )
            except ValidationError as exc:
                self.add_error(None, exc)
        return data


def _held_now(row: Notification) -> str:
    return f"a worker holds it right now ({row.owner}, fence {row.fence}); try again once its lease ends"


def _finished(row: Notification) -> str:
    """A finished notification as the action reasons name it: its state and, for a delivery, when."""
    if row.status == Notification.Status.DELIVERED:
        return f"delivered at {timestamp(row.delivered_at)}"
    return row.status


def _why_no_retry(row: Notification) -> str:
    if row.status in (Notification.Status.PENDING, Notification.Status.FAILED):
        return _held_now(row)  # the only other thing that keeps a pending or failed row out
    if row.status == Notification.Status.EXPIRED:
        return "expired: past its expiry time it is never sent"
    if row.status == Notification.Status.CANCELLED:
        return "cancelled: a cancelled notification is not sent again"
    return f"{_finished(row)}: nothing to retry"


def _why_no_cancel(row: Notification) -> str:
    if row.status == Notification.Status.PENDING:
        return _held_now(row)
    if row.status == Notification.Status.CANCELLED:
        return "already cancelled"
    if row.status == Notification.Status.DELIVERED:
        return f"{_finished(row)}: too late to cancel"
    return f"{row.status}: nothing is queued to cancel"


# The same rows the services change (`notification_retry_now`, `notification_cancel`): never one a worker
# holds under a live lease, judged by the database clock.
def _free(rows: QuerySet[Any], *statuses: str) -> QuerySet[Any]:
    held = cast(NotificationQuerySet, rows.filter(status__in=statuses))
    return held.free_or_expired(default_clock)


NOTIFICATION_ACTIONS = {
    "retry_now": ActionRule(
        label="Retry now",
        applies_to="pending or failed notifications that no worker holds",
        rows=lambda qs: _free(qs, Notification.Status.PENDING, Notification.Status.FAILED),
        why_not=_why_no_retry,
    ),
    "cancel": ActionRule(
        label="Cancel",
        applies_to="pending notifications that no worker holds",
        rows=lambda qs: _free(qs, Notification.Status.PENDING),
        why_not=_why_no_cancel,
    ),
}


def _unclaimed(pk: int) -> bool:
    # Read fresh: the object the page was built from may be older than a claim.
    return Notification.objects.filter(pk=pk, status=Notification.Status.PENDING, fence=0, owner__isnull=True).exists()


# The times a caller chose (send_at, and a TTL from it) as the list reads them: never past this, so a row
# stored before send_at was bounded, with a time past year 9999 (PostgreSQL keeps it, Python cannot read
# it), still lists, and a day of room keeps any time zone's local time inside the calendar.
_LAST_SHOWN = datetime(9999, 12, 30, tzinfo=UTC)
_CHOSEN_TIMES = ("next_attempt_at", "expires_at")


class _ReadableTimesChangeList(ChangeList):
    """The notifications list, reading the caller-chosen times clamped in SQL (`_LAST_SHOWN`)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request, exclude_parameters)
        clamped = {
            f"shown_{name}": Least(F(name), Value(_LAST_SHOWN, output_field=DateTimeField())) for name in _CHOSEN_TIMES
        }
        shown: QuerySet[Any] = queryset.defer(*_CHOSEN_TIMES).annotate(**clamped)
        return shown


def _shown_time(obj: Notification, name: str) -> Any:
    """`name` as the list read it (clamped), or the field itself elsewhere."""
    shown = obj.__dict__.get(f"shown_{name}", _CHOSEN_TIMES)
    return getattr(obj, name) if shown is _CHOSEN_TIMES else shown


@admin.register(Notification)
class NotificationAdmin(ActionsWhereTheyApply, LeasedModelAdmin):
    """Add goes through `notification_create`, edits through `notification_edit` (only before the first claim).

    A claimed or finished notification is the record of what was sent: its page is read-only, with
    no Save or Delete. Lease fields are never written here (`LeasedModel.save` would refuse anyway).
    """

    form = NotificationForm
    # Eight columns that fit 1280 px with the filters: long text is cut to a line (whole on hover and
    # on the row's page), the times and the lease share one column each.
    list_display = ("id", "short_title", "short_token", "status_word", "attempts", "when", "reason", "lease")

    status_word = state_column("status", "status", sortable=True)

    list_filter = (
        state_filter("status", Notification.Status.values),
        DueNowFilter,
        LeaseStateFilter,
        "backend",
        HasAttemptWithOutcomeFilter,
    )
    search_fields = ("device_token", "title", "idempotency_key")
    readonly_fields = (
        "device",
        "status_word",
        "backend",
        "expires_at_display",
        "priority",
        "collapse_key",
        "attempts",
        "delivered_at_display",
        "provider_message_id",
        "shown_last_error",
        "idempotency_key",
        "lease_state",
        "owner",
        "fence",
        "lease_expires_at_display",
        "created_at_display",
        "sent_for",
        "next_attempt_display",
        "shown_token",
        "data_table",
    )
    fieldsets = (
        (None, {"fields": ("device", "backend", "device_token", "title", "body", "data", "sent_for")}),
        ("Expiry and collapse", {"fields": ("expires_at_display", "priority", "collapse_key")}),
        (
            "Delivery",
            {
                "fields": (
                    "status_word",
                    "attempts",
                    "next_attempt_display",
                    "delivered_at_display",
                    "provider_message_id",
                    "shown_last_error",
                )
            },
        ),
        (
            "Lease (written by workers only)",
            {"fields": ("lease_state", "owner", "fence", "lease_expires_at_display")},
        ),
        ("Identity", {"fields": ("idempotency_key", "created_at_display")}),
    )

    @admin.display(description="next attempt at (database clock)")
    def next_attempt_display(self, obj: Notification) -> str:
        # Only a pending row has a next attempt; a finished one keeps its last due time, which would mislead.
        if obj.status != Notification.Status.PENDING:
            return f"— ({obj.status}: no next attempt)"
        return timestamp(obj.next_attempt_at)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _ReadableTimesChangeList

    @admin.display(description="when", ordering="next_attempt_at")
    def when(self, obj: Notification) -> str:
        """The one time that matters for the row's status: due, delivered, or when it finished."""
        if obj.status == Notification.Status.PENDING:
            return f"due {timestamp(_shown_time(obj, 'next_attempt_at'))}"
        if obj.status == Notification.Status.DELIVERED:
            return f"delivered {timestamp(obj.delivered_at)}"
        return "—"

    short_title = clipped_column("title")

    @admin.display(description="device token")
    def shown_token(self, obj: Notification) -> str:
        return mask_token(obj.device_token, getattr(obj.device, "platform", "") if obj.device_id else "")

    @admin.display(description="data")
    def data_table(self, obj: Notification) -> str:
        return key_values(obj.data)

    delivered_at_display = timestamp_column("delivered_at")
    created_at_display = timestamp_column("created_at")
    expires_at_display = timestamp_column("expires_at")
    inlines = (DeliveryAttemptInline,)
    actions = ("retry_now", "cancel")
    action_rules = NOTIFICATION_ACTIONS
    explain_kind = "notification"

    @admin.display(description="reason")
    def reason(self, obj: Notification) -> str:
        # The first line, cut to the column: the story of a row that gave up goes on over several lines
        # (the title attribute and the change page have it all).
        return clipped(said_once((obj.last_error or "").split("\n", 1)[0]))

    @admin.display(description="sent for")
    def sent_for(self, obj: Notification) -> str:
        """The onboarding run and supplier a welcome notification belongs to (by URL name: no import of onboarding)."""
        data = obj.data if isinstance(obj.data, dict) else {}
        links = []
        if data.get("onboarding_run_id") is not None:
            run_id = data["onboarding_run_id"]
            links.append(admin_link_to("weave_onboarding", "onboardingrun", run_id, f"onboarding run #{run_id}"))
        if data.get("supplier_id") is not None:
            supplier_id = data["supplier_id"]
            links.append(admin_link_to("weave_onboarding", "supplier", supplier_id, f"supplier #{supplier_id}"))
        return format_html_join(", ", "{}", ((link,) for link in links)) if links else "—"

    @admin.display(description="last error")
    def shown_last_error(self, obj: Notification) -> str:
        return shown(obj.last_error)

    def get_readonly_fields(self, request: HttpRequest, obj: Notification | None = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        # Where it goes is fixed once it exists: only title, body and data may change before a claim.
        return (*fields, "device_token") if obj is not None else fields

    def get_fieldsets(self, request: HttpRequest, obj: Notification | None = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            return fieldsets
        # An existing row shows its token masked, and its data as a table once it can no longer be edited.
        editable = self.has_change_permission(request, obj)
        swap = {"device_token": "shown_token", **({} if editable else {"data": "data_table"})}
        return [
            (name, {**opts, "fields": [swap.get(str(f), f) for f in opts.get("fields", ())]})
            for name, opts in fieldsets
        ]

    def get_inlines(self, request: HttpRequest, obj: Notification | None) -> Any:
        return self.inlines if obj is not None else ()  # a new notification has no attempts yet

    def has_change_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        if obj is not None and (obj.fence > 0 or obj.owner is not None or obj.status != Notification.Status.PENDING):
            return False  # claimed or finished: a read-only page
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        return False  # cancel instead: the row and its attempts are the delivery record

    def save_model(self, request: HttpRequest, obj: Notification, form: forms.ModelForm, change: bool) -> None:
        cleaned = form.cleaned_data
        content: dict[str, Any] = {
            "device_token": cleaned.get("device_token", ""),
            "title": cleaned.get("title", ""),
            "body": cleaned.get("body") or "",
            "data": cleaned.get("data"),
        }
        if not change:
            created = notification_create(**content)  # due at once and enqueued, like any other
            obj.pk = created.pk
            obj._state.adding = False
            return
        try:
            notification_edit(
                notification_id=obj.pk, title=content["title"], body=content["body"], data=content["data"]
            )
        except ContentLocked as exc:
            # A claim landed between the form check and this save: nothing was written.
            request._weave_refused = str(exc)  # type: ignore[attr-defined]

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        if getattr(request, "_weave_refused", None):
            return None  # nothing changed: no history entry claiming it did
        return super().log_change(request, obj, message)

    def response_change(self, request: HttpRequest, obj: Notification) -> HttpResponse:
        refused = getattr(request, "_weave_refused", None)
        if refused:
            self.message_user(request, refused, level=messages.ERROR)
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    @admin.display(description="device token")
    def short_token(self, obj: Notification) -> str:
        return clipped(mask_token(obj.device_token), one_line=True)

    has_manage_delivery_permission = permission_check("weave_notifications.manage_delivery")

    @admin.action(description="Retry pending or failed notifications now", permissions=["manage_delivery"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        result = notification_retry_now(
            notification_ids=list(queryset.values_list("pk", flat=True)), requested_by=request.user.get_username()
        )
        self._report(request, result, "Retry now requested.", "due now", applies_to="pending or failed")

    @admin.action(description="Cancel pending notifications", permissions=["manage_delivery"])
    def cancel(self, request: HttpRequest, queryset: QuerySet) -> None:
        result = notification_cancel(
            notification_ids=list(queryset.values_list("pk", flat=True)), requested_by=request.user.get_username()
        )
        self._report(request, result, "Cancelled.", "cancelled", applies_to="pending")

    def _report(self, request: HttpRequest, result: BulkResult, history: str, done: str, *, applies_to: str) -> None:
        """Each changed row goes to the admin history (its timeline shows it as an operator event), and the
        outcomes are said with the notifications linked."""
        busy = "{count} notification{s} left alone, held by a worker right now: {ids}. Try again when the "
        busy += "lease is released."
        changed = "{count} notification{s} " + done + ": {ids}."
        skipped = "This action applies to " + applies_to + " notifications only; {count} left alone: {ids}."
        ids = partial(linked_ids, Notification)
        self.report_outcomes(request, result, history=history, said=(changed, busy, skipped), ids=ids)


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(_AttemptColumns, OperatorModelAdmin):
    list_display = (
        "id",
        "notification_link",
        "outcome_word",
        "http_status",
        "latency_ms",
        "held_by",
        "started_at_display",
        "list_reason",
    )
    list_filter = (
        state_filter("outcome", DeliveryAttempt.Outcome.values),
        within_filter("finished_at", "finished", "finished"),
    )

    outcome_word = state_column("outcome", "outcome", sortable=True)

    search_fields = ("reason", "owner")
    list_select_related = ("notification",)
    fields = readonly_fields = (
        "notification",
        "owner",
        "fence",
        "started_at_display",
        "finished_at_display",
        "http_status",
        "latency_ms",
        "outcome_word",
        "shown_reason",
    )

    list_reason = reason_column(clip=True)

    notification_link = link_column("notification", text="#{}")

    @admin.display(description="worker · fence")
    def held_by(self, obj: DeliveryAttempt) -> str:
        return format_html("{} · fence {}", clipped(obj.owner, one_line=True), obj.fence)


@admin.register(BreakerOpening)
class BreakerOpeningAdmin(ReadOnlyAdminMixin, OperatorModelAdmin):
    """When a push worker's circuit breaker opened, and why (also on the Weave dashboard)."""

    list_display = ("opened_at_display", "owner", "shown_reason")
    list_filter = (within_filter("opened_at", "opened", "opened"),)

    shown_reason = reason_column(clip=True)

    search_fields = ("owner", "reason")
    opened_at_display = timestamp_column("opened_at", "opened at (database clock)")


def _inactive(device: Device) -> str:
    why = said_once(device.deactivation_reason).rstrip(".")
    return f"inactive since {timestamp(device.deactivated_at)}" + (f" ({why})" if why else "")


DEVICE_ACTIONS = {
    "send_test_notification": ActionRule(
        label="Send test notification",
        applies_to="active devices",
        rows=lambda qs: qs.filter(active=True),
        why_not=lambda device: f"{_inactive(device)}: a notification to it would fail at once",
    ),
    "deactivate": ActionRule(
        label="Deactivate",
        applies_to="active devices",
        rows=lambda qs: qs.filter(active=True),
        why_not=lambda device: f"already {_inactive(device)}",
    ),
}


def _first_ten(clauses: list[Any]) -> str:
    return format_html_join(". ", "{}", ((clause,) for clause in clauses[:10]))


@admin.register(Device)
class DeviceAdmin(ActionsWhereTheyApply, OperatorModelAdmin):
    list_display = ("id", "user", "backend", "platform_name", "short_token", "active", "created_at", "deactivated_at")
    list_filter = ("active", "backend", PlatformFilter)

    @admin.display(description="platform", ordering="platform")
    def platform_name(self, obj: Device) -> str:
        return PLATFORM_NAMES.get(obj.platform, obj.platform or "—")

    search_fields = ("token", "user__username", "user__email")
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    readonly_fields = (
        "created_at", "last_used_at", "active", "deactivated_at", "deactivation_reason", "owner_changed_at",
    )  # fmt: skip
    fields = ("user", "backend", "platform", "token", *readonly_fields)

    def get_fields(self, request: HttpRequest, obj: Device | None = None) -> Any:
        # An existing device's token is shown masked and never edited: a person types one only when adding.
        fields = list(super().get_fields(request, obj))
        return [("short_token" if f == "token" else f) for f in fields] if obj is not None else fields

    def get_readonly_fields(self, request: HttpRequest, obj: Device | None = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, "short_token") if obj is not None else fields

    def formfield_for_choice_field(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "platform":  # "iOS", not the generated "Ios"
            kwargs["choices"] = [("", "—"), *PLATFORM_NAMES.items()]
        return super().formfield_for_choice_field(db_field, request, **kwargs)

    actions = ("send_test_notification", "deactivate")
    action_rules = DEVICE_ACTIONS

    @admin.display(description="token")
    def short_token(self, obj: Device) -> str:
        return mask_token(obj.token, obj.platform)

    has_send_test_notification_permission = permission_check("weave_notifications.send_test_notification")

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
                # One clause per device, without the messages' own brackets nested in ours.
                problems = "; ".join(m.rstrip(".") for m in exc.messages)
                refused.append(format_html("device {}: {}", linked_ids(Device, [device.pk]), problems))
                continue
            sent.append(notification.pk)
            self.log_change(request, device, f"Sent test notification {notification.pk}.")
            self.log_addition(request, notification, f"Sent as a test to device {device.pk}.")
        self.say_rows(
            request, "{count} test notification{s} queued: {ids}.", sent, ids=partial(linked_ids, Notification)
        )
        self.say_rows(request, "Not sent to {count} device{s}. {ids}.", refused, ids=_first_ten, level=messages.WARNING)

    @admin.action(description="Deactivate (fails their queued notifications)", permissions=["change"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet) -> None:
        who = request.user.get_username()
        done = []
        for device in queryset.filter(active=True).order_by("pk"):
            device_deactivate(device=device, reason=f"Deactivated in the admin by {who}.")
            self.log_change(request, device, "Deactivated.")
            done.append(device.pk)
        self.say_rows(request, "{count} device{s} deactivated: {ids}.", done, ids=partial(linked_ids, Device))
        if not done:
            self.message_user(request, "No active device among the selected ones.")


@admin.register(TopicSubscription)
class TopicSubscriptionAdmin(JobAdminMixin):
    """FCM topic subscription jobs: the core's job admin, every field read-only (the services create them)."""

    list_display = ("pk", "action", "short_topic", "backend", "token_count")
    list_filter = ("action", "backend")
    search_fields = ("topic",)
    fields = readonly_fields = ("action", "topic", "backend", "token_count")

    short_topic = clipped_column("topic", one_line=True)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # topic_subscribe() and topic_unsubscribe() make them, with every check

    @admin.display(description="tokens")
    def token_count(self, obj: TopicSubscription) -> int:
        return len(obj.tokens) if isinstance(obj.tokens, list) else 0

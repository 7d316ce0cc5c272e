"""The shared admin pieces: lease state by the database clock, read-only rows, one timeline per job."""

import pytest
from django.contrib import admin
from django.test import RequestFactory

from notifications.models import DeliveryAttempt, Notification
from onboarding.models import OnboardingRun, RunAttempt
from tests.factories import NotificationFactory, OnboardingRunFactory
from weave.admin import LeasedModelAdmin, ReadOnlyAdminMixin

pytestmark = pytest.mark.django_db


def test_both_job_admins_share_the_leased_admin_and_receipts_are_read_only():
    for model in (Notification, OnboardingRun):
        assert isinstance(admin.site._registry[model], LeasedModelAdmin)
    for model in (DeliveryAttempt, RunAttempt):
        model_admin = admin.site._registry[model]
        assert isinstance(model_admin, ReadOnlyAdminMixin)
        request = RequestFactory().get("/")
        assert not any(
            check(request)
            for check in (
                model_admin.has_add_permission,
                model_admin.has_change_permission,
                model_admin.has_delete_permission,
            )
        )


def test_lease_state__free_live_and_expired_even_without_the_annotation():
    model_admin = admin.site._registry[Notification]
    free, live, expired = NotificationFactory(), NotificationFactory(), NotificationFactory()
    Notification.objects.claim(live.pk, owner="w-live", ttl=60)
    Notification.objects.claim(expired.pk, owner="w-gone", ttl=-1)  # already past by the database clock
    plain = {row.pk: row for row in Notification.objects.all()}  # no lease_live annotation
    annotated = {row.pk: row for row in model_admin.get_queryset(RequestFactory().get("/"))}
    for rows in (plain, annotated):
        assert [model_admin.lease_state(rows[pk]) for pk in (free.pk, live.pk, expired.pk)] == [
            "free",
            "live",
            "expired",
        ]


def test_timeline_comes_from_the_explainer_registered_for_the_kind():
    row = NotificationFactory()
    html = admin.site._registry[Notification].timeline(row)
    assert "weave-timeline" in html and f"Notification {row.pk}" in html


def test_link_column__the_row_itself_or_its_key_without_reading_it(django_assert_num_queries):
    from django.urls import reverse

    from weave.admin import link_column

    row = NotificationFactory(title="Parcel on its way")
    attempt = DeliveryAttempt.objects.create(notification=row, owner="w", fence=1, started_at=row.created_at)
    attempt = DeliveryAttempt.objects.get(pk=attempt.pk)  # the notification not loaded
    url = reverse("admin:weave_notifications_notification_change", args=[row.pk])
    by_key = link_column("notification", text="#{}")
    with django_assert_num_queries(0):
        assert by_key(None, attempt) == f'<a href="{url}">#{row.pk}</a>'
    assert link_column("notification")(None, attempt) == f'<a href="{url}">{row}</a>'
    assert by_key.short_description == "notification" and by_key.admin_order_field == "notification"
    run = OnboardingRunFactory(created_by=None)
    assert link_column("created_by", text="#{}")(None, run) == link_column("created_by")(None, run) == "—"


def test_clipped_column__cut_in_the_list_whole_in_the_title():
    from weave.admin import clipped_column

    row = NotificationFactory(title="A <b>long</b> title")
    shown = clipped_column("title", one_line=True)(None, row)
    assert shown == (
        '<span class="weave-clip-line" title="A &lt;b&gt;long&lt;/b&gt; title">A &lt;b&gt;long&lt;/b&gt; title</span>'
    )
    assert clipped_column("title")(None, row).startswith('<span class="weave-clip" ')


def test_permission_check__the_users_own_permission_decides():
    from django.contrib.auth.models import Permission, User

    from weave.admin import permission_check

    user = User.objects.create_user("operator", is_staff=True)
    request = RequestFactory().get("/")
    request.user = user
    check = permission_check("weave_notifications.manage_delivery")
    assert check(None, request) is False
    user.user_permissions.add(Permission.objects.get(codename="manage_delivery"))
    request.user = User.objects.get(pk=user.pk)  # permissions are cached on the instance
    assert check(None, request) is True


def test_say_rows__count_and_ids_once_and_nothing_for_no_rows():
    from django.contrib.messages.storage.fallback import FallbackStorage

    request = RequestFactory().post("/")
    request.session = {}
    request._messages = FallbackStorage(request)
    model_admin = admin.site._registry[Notification]
    model_admin.say_rows(request, "{count} done: {ids}.", [])
    model_admin.say_rows(request, "{count} left: {ids}.", ["#7 (a <b> row)", "#8 (done)"], joiner="; ")
    assert [str(m) for m in request._messages] == ["2 left: #7 (a &lt;b&gt; row); #8 (done)."]


def test_actions_where_they_apply__a_ruled_action_runs_only_when_some_selected_row_applies():
    from django.contrib.auth.models import User
    from django.contrib.messages.storage.fallback import FallbackStorage

    from weave.admin import ActionRule, ActionsWhereTheyApply, OperatorModelAdmin

    ran = []

    @admin.action(description="Touch")
    def touch(self, request, queryset):
        ran.append(sorted(queryset.values_list("pk", flat=True)))

    rule = ActionRule("Touch", "pending notifications", lambda qs: qs.filter(status="pending"), lambda row: row.status)
    attrs = {"actions": ["touch"], "action_rules": {"touch": rule}, "touch": touch, "__module__": __name__}
    model_admin = type("TouchAdmin", (ActionsWhereTheyApply, OperatorModelAdmin), attrs)(Notification, admin.site)
    pending, delivered = NotificationFactory(), NotificationFactory(status="delivered")
    request = RequestFactory().post("/")
    request.user, request.session = User.objects.create_superuser("root"), {}
    request._messages = FallbackStorage(request)
    action = model_admin.get_actions(request)["touch"]
    func = action[0] if isinstance(action, tuple) else action.func

    func(model_admin, request, Notification.objects.filter(pk=delivered.pk))
    assert ran == []  # the action itself never ran: it said why instead
    said = [str(m) for m in request._messages]
    assert said == [f"Touch applies only to pending notifications; not to the selected: #{delivered.pk} (delivered)."]
    func(model_admin, request, Notification.objects.filter(pk__in=[pending.pk, delivered.pk]))
    assert ran == [sorted([pending.pk, delivered.pk])]

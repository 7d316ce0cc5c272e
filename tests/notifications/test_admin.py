"""The admin: pages render, lease fields are read-only, actions go through guarded services and need permission."""

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory
from weave.leases import default_clock

pytestmark = pytest.mark.django_db
CHANGELIST = reverse("admin:weave_notifications_notification_changelist")


def staff(*codenames: str) -> User:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    perms = Permission.objects.filter(content_type__app_label="weave_notifications", codename__in=codenames)
    user.user_permissions.set(perms)
    return user


def act(client, action, rows):
    return client.post(
        CHANGELIST, {"action": action, "_selected_action": [r.pk for r in rows], "index": 0}, follow=True
    )


@pytest.fixture
def failed_row():
    row = NotificationFactory(status="failed", attempts=5, last_error="Gave up")
    DeliveryAttempt.objects.create(
        notification=row, owner="w", fence=1, started_at=row.created_at, outcome="temporary", reason="HTTP 503"
    )
    return row


def test_changelist_and_change_page_render_with_lease_state_and_attempts(admin_client, failed_row):
    held = NotificationFactory()
    Notification.objects.filter(pk=held.pk).claim(held.pk, owner="worker-x", ttl=60)
    page = admin_client.get(CHANGELIST)
    assert page.status_code == 200
    assert b"worker-x" in page.content and b"live" in page.content
    for query in ("?status__exact=failed", "?attempt_outcome=temporary", "?attempt_outcome=lease_lost"):
        assert admin_client.get(CHANGELIST + query).status_code == 200
    filtered = admin_client.get(CHANGELIST + "?attempt_outcome=temporary")
    assert list(filtered.context["cl"].result_list) == [failed_row]
    change = admin_client.get(reverse("admin:weave_notifications_notification_change", args=[failed_row.pk]))
    assert change.status_code == 200
    assert b"HTTP 503" in change.content  # the inline attempt history
    form_fields = change.context["adminform"].form.fields
    assert not {"owner", "fence", "lease_expires_at", "status", "attempts"} & set(form_fields)


def test_retry_now__allowed_with_permission(client, failed_row):
    client.force_login(staff("view_notification", "manage_delivery"))
    page = act(client, "retry_now", [failed_row])
    failed_row.refresh_from_db()
    assert (failed_row.status, failed_row.attempts) == ("pending", 0)
    assert "Retry requested by staff" in failed_row.last_error
    assert "1 notification due now" in page.content.decode()


def test_actions__refused_without_the_permission(client, failed_row):
    pending = NotificationFactory()
    client.force_login(staff("view_notification", "change_notification"))
    page = client.get(CHANGELIST)
    assert page.status_code == 200
    form = page.context["action_form"]
    offered = dict(form.fields["action"].choices) if form else {}
    assert "retry_now" not in offered and "cancel" not in offered
    for action, row in (("retry_now", failed_row), ("cancel", pending)):
        before = Notification.objects.values().get(pk=row.pk)
        act(client, action, [row])
        assert Notification.objects.values().get(pk=row.pk) == before


def test_cancel__leaves_rows_a_worker_holds_and_reports_them(client):
    free, held, done = NotificationFactory(), NotificationFactory(), NotificationFactory(status="delivered")
    lease = Notification.objects.claim(held.pk, owner="worker-x", ttl=60, clock=default_clock)
    client.force_login(staff("view_notification", "manage_delivery"))
    page = act(client, "cancel", [free, held, done]).content.decode()
    statuses = dict(Notification.objects.values_list("pk", "status"))
    assert statuses == {free.pk: "cancelled", held.pk: "pending", done.pk: "delivered"}
    assert (
        f'1 notification left alone, held by a worker right now: <a href="{CHANGELIST}{held.pk}/change/">{held.pk}</a>'
        in page
    )
    assert (
        "This action applies to pending notifications only; 1 left alone: "
        f'<a href="{CHANGELIST}{done.pk}/change/">{done.pk}</a>' in page
    )
    # The worker's lease is intact, so its finish still lands.
    Notification.objects.release(lease, status="delivered")
    assert Notification.objects.get(pk=held.pk).status == "delivered"

"""The admin never writes lease fields, adds through the service, keeps sent content fixed, logs actions."""

import threading

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connections
from django.urls import reverse
from django_q.models import OrmQ

from notifications.admin import NotificationAdmin
from notifications.models import Notification
from tests.factories import NotificationFactory
from weave.leases import default_clock

ADD = reverse("admin:weave_notifications_notification_add")
CHANGELIST = reverse("admin:weave_notifications_notification_changelist")


def change_url(row):
    return reverse("admin:weave_notifications_notification_change", args=[row.pk])


def form(**changes):
    inline = {"delivery_attempts-TOTAL_FORMS": "0", "delivery_attempts-INITIAL_FORMS": "0"}
    return {"device_token": "device-9", "title": "Hello", "body": "Body", "data": "{}", **inline, **changes}


@pytest.mark.django_db
def test_add__goes_through_notification_create_so_the_row_is_due_and_a_drain_enqueued(
    admin_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(ADD, form())
    assert response.status_code == 302, response.content
    row = Notification.objects.get()
    assert row.next_attempt_at is not None and row.status == "pending" and row.fence == 0
    assert Notification.objects.claimable().filter(pk=row.pk).exists()
    assert [q.name() for q in OrmQ.objects.all()] == ["notifications.drain"]


@pytest.mark.django_db
def test_add__invalid_content_is_refused_on_the_form_and_nothing_is_stored(admin_client):
    response = admin_client.post(ADD, form(title="nul\x00inside", data='{"x": NaN}'))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert not Notification.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["claimed", "delivered"])
def test_change__a_claimed_or_finished_notification_is_read_only(admin_client, state):
    row = NotificationFactory(title="As sent")
    if state == "claimed":
        Notification.objects.claim(row.pk, owner="worker-x", ttl=60, clock=default_clock)
    else:
        Notification.objects.filter(pk=row.pk).update(status="delivered", fence=1)
    page = admin_client.get(change_url(row))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="_save"' not in html and "deletelink" not in html
    admin_client.post(change_url(row), form(title="Rewritten"))
    assert Notification.objects.get(pk=row.pk).title == "As sent"


@pytest.mark.django_db
def test_change__an_unclaimed_notification_is_edited_through_the_service(admin_client):
    row = NotificationFactory(title="Draft")
    response = admin_client.post(change_url(row), form(title="Final"))
    assert response.status_code == 302
    after = Notification.objects.get(pk=row.pk)
    assert (after.title, after.fence, after.owner) == ("Final", 0, None)


@pytest.mark.django_db
def test_view_only_user__sees_no_save_or_delete(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_notification"))
    client.force_login(user)
    row = NotificationFactory()
    html = client.get(change_url(row)).content.decode()
    assert 'name="_save"' not in html and "deletelink" not in html


@pytest.mark.django_db
def test_actions__are_written_to_the_admin_history(admin_client):
    pending, failed = NotificationFactory(), NotificationFactory(status="failed")
    admin_client.post(CHANGELIST, {"action": "retry_now", "_selected_action": [failed.pk], "index": 0})
    admin_client.post(CHANGELIST, {"action": "cancel", "_selected_action": [pending.pk], "index": 0})
    entries = {(e.object_id, e.get_change_message()) for e in LogEntry.objects.all()}
    assert (str(failed.pk), "Retry now requested.") in entries
    assert (str(pending.pk), "Cancelled.") in entries


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_race__a_claim_landing_during_an_admin_save_is_never_undone(admin_client, monkeypatch):
    """The admin has read the row (fence 0); a worker on another connection claims it; then the save runs."""
    row = NotificationFactory(title="Draft")
    claimed = {}
    original = NotificationAdmin.save_model

    def save_after_a_claim(self, request, obj, form, change):
        def worker():
            try:
                claimed["lease"] = Notification.objects.claim(row.pk, owner="worker-a", ttl=60, clock=default_clock)
            finally:
                connections.close_all()

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(30)
        assert "lease" in claimed, "the worker's claim did not land"
        return original(self, request, obj, form, change)

    monkeypatch.setattr(NotificationAdmin, "save_model", save_after_a_claim)
    admin_client.post(change_url(row), form(title="Edited by the admin"))

    after = Notification.objects.values("owner", "fence", "title", "lease_expires_at").get(pk=row.pk)
    lease = claimed["lease"]
    # The fence never goes back and the claim stands; the content the worker claimed is unchanged.
    assert (after["owner"], after["fence"]) == ("worker-a", lease.fence) and lease.fence == 1
    assert after["lease_expires_at"] is not None
    assert after["title"] == "Draft"
    assert not LogEntry.objects.filter(object_id=str(row.pk)).exists()  # no history claiming a change

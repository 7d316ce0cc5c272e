"""The job admin never deletes a job under a live lease (its worker would find the row gone): the list's
"Delete selected" and the page's "Delete" refuse such rows, naming the holder and the lease's expiry by the
database clock, and delete them once the lease is over. The lease test and the lock are one statement."""

import threading
from datetime import timedelta

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.messages import get_messages
from django.urls import reverse

from tests.jobs.shipping.models import Shipment
from weave.leases import FakeClock, LeaseBusy, NotClaimable
from weave.telemetry import db_now
from weave.timeline import stamp

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/shipping/shipment/"


def held(parcel: str = "books", owner: str = "worker-a") -> Shipment:
    """A shipment a worker holds under a live lease (by the database clock)."""
    shipment = Shipment.objects.create(parcel=parcel)
    Shipment.objects.claim(shipment.pk, owner=owner, ttl=300)
    return Shipment.objects.get(pk=shipment.pk)


def lapsed(parcel: str = "old") -> Shipment:
    """A shipment whose worker's lease ran out a minute ago."""
    shipment = Shipment.objects.create(parcel=parcel)
    Shipment.objects.claim(
        shipment.pk, owner="gone-worker", ttl=30, clock=FakeClock(start=db_now() - timedelta(minutes=2))
    )
    return Shipment.objects.get(pk=shipment.pk)


def said(response) -> str:
    return " | ".join(str(m) for m in get_messages(response.wsgi_request))


def bulk_delete(client, pks, *, confirmed: bool):
    data = {"action": "delete_selected", "_selected_action": [str(pk) for pk in pks]}
    if confirmed:
        data["post"] = "yes"
    return client.post(CHANGELIST, data)


def test_delete_selected__a_row_under_a_live_lease_is_refused_naming_its_holder_and_expiry(admin_client):
    busy = held()
    response = bulk_delete(admin_client, [busy.pk], confirmed=False)
    assert response.status_code == 302, "no confirmation page for rows that cannot be deleted"
    text = said(response)
    assert (
        f"shipment {busy.pk} (books): held by worker-a under a live lease until {stamp(busy.lease_expires_at)}" in text
    )
    assert "database time" in text
    assert Shipment.objects.filter(pk=busy.pk).exists()


def test_delete_selected__the_refusal_advises_only_what_the_admin_would_do_for_a_held_row(admin_client):
    busy = held()
    refusal = said(bulk_delete(admin_client, [busy.pk], confirmed=False))
    cancel = admin_client.post(CHANGELIST, {"action": "cancel_jobs", "_selected_action": [str(busy.pk)]})
    assert "Busy (a worker holds a live lease), left alone" in said(cancel), "Cancel leaves a held job alone too"
    assert "cancel" not in refusal.lower(), f"the refusal must not send the operator to a refused action: {refusal}"
    assert "delete it once the lease is over" in refusal


def test_delete_selected__the_confirmation_warns_and_only_the_free_rows_are_deleted(admin_client):
    busy, free, old = held(), Shipment.objects.create(parcel="free"), lapsed()
    page = bulk_delete(admin_client, [busy.pk, free.pk, old.pk], confirmed=False)
    assert page.status_code == 200
    html = page.content.decode()
    assert "held by worker-a under a live lease" in html, "the confirmation page says what is kept"
    assert f'value="{busy.pk}"' not in html and f'value="{free.pk}"' in html and f'value="{old.pk}"' in html

    response = bulk_delete(admin_client, [busy.pk, free.pk, old.pk], confirmed=True)
    assert set(Shipment.objects.values_list("pk", flat=True)) == {busy.pk}
    text = said(response)
    assert "Successfully deleted 2 shipments." in text and "held by worker-a" in text
    logged = LogEntry.objects.filter(action_flag=DELETION).values_list("object_id", flat=True)
    assert sorted(logged) == sorted([str(free.pk), str(old.pk)]), "only what was deleted is in the history"


def test_delete_selected__a_row_claimed_after_the_confirmation_page_is_kept(admin_client):
    shipment = Shipment.objects.create(parcel="books")
    assert bulk_delete(admin_client, [shipment.pk], confirmed=False).status_code == 200
    Shipment.objects.claim(shipment.pk, owner="worker-b", ttl=300)  # a worker takes it meanwhile
    response = bulk_delete(admin_client, [shipment.pk], confirmed=True)
    assert Shipment.objects.filter(pk=shipment.pk).exists()
    assert "held by worker-b under a live lease" in said(response)
    assert not LogEntry.objects.filter(action_flag=DELETION).exists()


def test_delete_page__refused_under_a_live_lease_and_allowed_once_it_is_over(admin_client):
    busy = held()
    url = reverse("admin:shipping_shipment_delete", args=[busy.pk])
    response = admin_client.get(url)
    assert response.status_code == 302 and response["Location"].endswith(f"/shipping/shipment/{busy.pk}/change/")
    assert "held by worker-a under a live lease until" in said(response)
    response = admin_client.post(url, {"post": "yes"})
    assert Shipment.objects.filter(pk=busy.pk).exists() and "held by worker-a" in said(response)

    old = lapsed()
    url = reverse("admin:shipping_shipment_delete", args=[old.pk])
    assert admin_client.get(url).status_code == 200, "the confirmation page, once the lease is over"
    admin_client.post(url, {"post": "yes"})
    assert not Shipment.objects.filter(pk=old.pk).exists()


def test_delete_page__a_deletion_is_in_the_story_of_the_job_it_leaves(admin_client, clock):
    from io import StringIO

    from django.core.management import call_command

    from weave.jobs.runner import run_job

    shipment = Shipment.objects.create(parcel="books")
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "done"
    admin_client.post(reverse("admin:shipping_shipment_delete", args=[shipment.pk]), {"post": "yes"})
    out = StringIO()
    call_command("weave_explain", "shipment", str(shipment.pk), stdout=out)
    assert "The job row is gone (deleted)" in out.getvalue() and "admin deleted it in the admin at" in out.getvalue()


def test_the_shipped_topic_admin_refuses_it_too(admin_client):
    from notifications.models import TopicSubscription

    row = TopicSubscription.objects.create(backend="fcm", topic="news", action="subscribe", tokens=["x"])
    TopicSubscription.objects.claim(row.pk, owner="drain-1", ttl=300)
    response = admin_client.post(
        "/admin/weave_notifications/topicsubscription/",
        {"action": "delete_selected", "_selected_action": [str(row.pk)]},
    )
    assert "held by drain-1 under a live lease" in said(response)
    assert TopicSubscription.objects.filter(pk=row.pk).exists()


def test_lock_free__a_row_is_tested_and_locked_in_one_statement_so_no_claim_lands_before_the_delete(clock):
    free, busy = Shipment.objects.create(parcel="a"), held("b")
    assert Shipment.objects.filter(pk__in=[free.pk, busy.pk]).delete_free() == [free.pk]
    assert list(Shipment.objects.values_list("pk", flat=True)) == [busy.pk]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_delete_free__a_claim_racing_the_delete_waits_for_it_and_finds_the_row_gone():
    from django.db import connection, transaction

    shipment = Shipment.objects.create(parcel="books")
    locked, release = threading.Event(), threading.Event()

    def delete_slowly():
        try:
            with transaction.atomic():
                assert Shipment.objects.filter(pk=shipment.pk).lock_free() == [shipment.pk]
                locked.set()
                release.wait(10)
                Shipment.objects.filter(pk=shipment.pk).delete()
        finally:
            connection.close()

    deleter = threading.Thread(target=delete_slowly)
    deleter.start()
    assert locked.wait(10)
    with pytest.raises(LeaseBusy, match="locked by another transaction"):
        Shipment.objects.claim(shipment.pk, owner="worker-a", ttl=300)
    release.set()
    deleter.join(10)
    with pytest.raises(NotClaimable, match="does not exist"):
        Shipment.objects.claim(shipment.pk, owner="worker-a", ttl=300)

"""The start, retry and cancel actions of `JobAdminMixin`, through the real admin."""

import pytest
from django.urls import reverse

from tests.jobs.shipping.models import Shipment
from weave.leases import DatabaseClock

pytestmark = pytest.mark.django_db


def act(client, action, *pks):
    url = reverse("admin:shipping_shipment_changelist")
    return client.post(url, {"action": action, "_selected_action": [str(pk) for pk in pks]}, follow=True)


def messages_of(response):
    return [str(m) for m in response.context["messages"]]


def test_cancel__busy_jobs_are_left_alone_and_named(admin_client):
    free = Shipment.objects.create(parcel="a")
    held = Shipment.objects.create(parcel="b")
    Shipment.objects.claim(held.pk, owner="worker", ttl=60, clock=DatabaseClock())
    response = act(admin_client, "cancel_jobs", free.pk, held.pk)
    assert Shipment.objects.get(pk=free.pk).state == "cancelled"
    assert Shipment.objects.get(pk=held.pk).state == "pending"
    said = messages_of(response)
    assert "Cancelled: 1 job." in said
    assert f"Busy (a worker holds a live lease), left alone: {held.pk}." in said


def test_retry__only_ended_jobs_start_over_in_a_new_epoch(admin_client):
    ended = Shipment.objects.create(parcel="a")
    Shipment.objects.filter(pk=ended.pk).update(state="failed")
    pending = Shipment.objects.create(parcel="b")
    response = act(admin_client, "retry_jobs", ended.pk, pending.pk)
    row = Shipment.objects.get(pk=ended.pk)
    assert (row.state, row.epoch, row.fence) == ("pending", 1, 1)
    assert f"Not in a state this action applies to: {pending.pk}." in messages_of(response)


def test_start__a_waiting_job_is_due_at_once(admin_client):
    from django.utils import timezone

    waiting = Shipment.objects.create(parcel="a", next_attempt_at=timezone.now().replace(year=2099))
    response = act(admin_client, "start_jobs", waiting.pk)
    assert Shipment.objects.get(pk=waiting.pk).next_attempt_at is None
    assert "Started: 1 job." in messages_of(response)

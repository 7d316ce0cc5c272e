"""Only weave.leases writes owner, fence and lease_expires_at: a hand-written save() is refused."""

import pytest

from notifications.models import ContentLocked, Notification
from onboarding.models import OnboardingRun
from tests.factories import NotificationFactory, OnboardingRunFactory
from tests.leasetest.models import Job
from weave.leases import LeaseFieldsProtected, default_clock

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("factory", [lambda: Job.objects.create(), NotificationFactory, OnboardingRunFactory])
def test_save__a_full_row_save_of_an_existing_row_is_refused_and_writes_nothing(factory):
    row = factory()
    model = type(row)
    lease = model.objects.claim(row.pk, owner="worker-a", ttl=60, clock=default_clock)
    # `row` still holds the values read before the claim: saving it would put the fence back.
    with pytest.raises(LeaseFieldsProtected):
        row.save()
    after = model.objects.values("owner", "fence").get(pk=row.pk)
    assert after == {"owner": "worker-a", "fence": lease.fence}


@pytest.mark.parametrize("fields", [["owner"], ["fence"], ["lease_expires_at"], ["phase", "fence"]])
def test_save__update_fields_naming_a_lease_field_is_refused(fields):
    job = Job.objects.create()
    job.fence = 99
    job.owner = "me"
    with pytest.raises(LeaseFieldsProtected):
        job.save(update_fields=fields)
    assert Job.objects.values_list("fence", "owner").get(pk=job.pk) == (0, None)


def test_save__other_fields_and_new_rows_still_save():
    job = Job.objects.create(state="open")
    job.state = "done"
    job.save(update_fields=["state"])
    assert Job.objects.get(pk=job.pk).state == "done"
    run = OnboardingRunFactory()
    run.reason = "noted"
    run.save(update_fields=["reason"])
    assert OnboardingRun.objects.get(pk=run.pk).reason == "noted"


def test_save__a_notification_content_change_through_save_is_refused():
    row = NotificationFactory()
    row.title = "Changed"
    with pytest.raises(ContentLocked):
        row.save(update_fields=["title"])
    assert Notification.objects.get(pk=row.pk).title != "Changed"

"""Quiet hours asked again when a worker claims a row: deferred without an attempt, through the guarded release."""

import logging
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from notifications.delivery import deliver_batch
from notifications.explain import explain_notification
from notifications.models import DeliveryAttempt, Notification
from notifications.services import device_register
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db
TTL = 30
# The policy's answer, changed by the tests: quiet until this time (None: never quiet), and a broken mode.
POLICY: dict = {"until": None, "broken": False}


def quiet_until_set_time(user, at, priority):
    """A site's policy whose answer changes after creation (the user moved their quiet hours)."""
    if POLICY["broken"]:
        raise RuntimeError("profile service down")
    until = POLICY["until"]
    if priority == "high" or until is None or at >= until:
        return None
    return until


@pytest.fixture(autouse=True)
def _policy():
    POLICY.update(until=None, broken=False)
    yield
    POLICY.update(until=None, broken=False)


@pytest.fixture
def device(push_settings):
    user = get_user_model().objects.create_user("sleeper")
    return device_register(user=user, backend="default", token="phone-quiet")


@pytest.fixture
def quiet(settings, push_settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_QUIET_HOURS": f"{__name__}.quiet_until_set_time"}


def row_for(device, clock, **fields):
    fields.setdefault("next_attempt_at", clock.current)
    return NotificationFactory(device=device, device_token=device.token, backend=device.backend, **fields)


def test_claim__a_row_now_inside_quiet_hours_is_deferred_without_an_attempt(quiet, fake, clock, device):
    row = row_for(device, clock)  # created while the policy let it go
    morning = clock.current + timedelta(hours=7)
    POLICY["until"] = morning  # ... and then the user's quiet hours began

    report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    row.refresh_from_db()
    assert (report.sent, report.deferred, report.released) == (0, 1, 1)
    assert fake.stats()["requests"] == 0
    assert (row.status, row.attempts, row.next_attempt_at, row.owner) == ("pending", 0, morning, None)
    assert row.fence == 1  # claimed once, released through the guard: the fence stays as the claim set it
    assert row.last_error.startswith("Deferred by the quiet-hours policy when the row was claimed from")
    assert not DeliveryAttempt.objects.filter(notification=row).exists()
    story = explain_notification(row.pk, clock=clock).as_text()
    assert "deferred" in story and "when the row was claimed" in story and "no attempt used" in story


def test_claim__the_deferred_row_goes_when_quiet_hours_end(quiet, fake, clock, device):
    row = row_for(device, clock)
    POLICY["until"] = clock.current + timedelta(hours=7)
    deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    clock.advance(7 * 3600)
    report = deliver_batch(clock=clock, owner="worker-b", ttl=TTL)

    row.refresh_from_db()
    assert (report.delivered, report.deferred) == (1, 0)
    assert (row.status, row.attempts) == ("delivered", 1)
    assert fake.stats()["requests"] == 1


def test_claim__high_priority_and_rows_without_a_user_are_not_deferred(quiet, fake, clock, device):
    urgent = row_for(device, clock, priority="high")
    raw = NotificationFactory(device_token="raw-token", next_attempt_at=clock.current)
    POLICY["until"] = clock.current + timedelta(hours=7)

    report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    assert (report.delivered, report.deferred) == (2, 0)
    assert set(Notification.objects.filter(pk__in=[urgent.pk, raw.pk]).values_list("status", flat=True)) == {
        "delivered"
    }


def test_claim__a_policy_that_raises_is_logged_and_the_row_is_sent(quiet, fake, clock, device, caplog):
    row = row_for(device, clock)
    POLICY["broken"] = True

    with caplog.at_level(logging.INFO, logger="weave"):
        report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)

    row.refresh_from_db()
    assert (report.delivered, report.deferred, row.status) == (1, 0, "delivered")
    assert "event=quiet_hours_error" in caplog.text and "profile service down" in caplog.text


def test_claim__a_stale_lease_defers_nothing(quiet, fake, clock, device):
    """The deferral is the lease's guarded release: a worker whose lease lapsed writes nothing."""
    from notifications.delivery import PushWorker

    row = row_for(device, clock)
    later = clock.current + timedelta(hours=7)
    worker = PushWorker(clock=clock, owner="stale", ttl=TTL)
    try:
        _, (claimed,) = worker.buffer.claim(10)
        clock.advance(TTL + 1)
        Notification.objects.claimable(clock).claim(row.pk, owner="rival", ttl=TTL, clock=clock)
        landed = worker.defer([(claimed, later, "Deferred by the quiet-hours policy (a stale worker)")])
    finally:
        worker.close()

    row.refresh_from_db()
    assert landed == 0
    assert (row.owner, row.fence, row.last_error, row.next_attempt_at) == (
        "rival",
        2,
        "",
        clock.current - timedelta(seconds=TTL + 1),
    )


# The statements one claimed-and-delivered row costs without quiet hours: the claim, the devices'
# state, the guarded finish with its receipt (with the savepoints around both), the device touch.
BASELINE = 9


def test_claim__no_policy_costs_no_query(push_settings, fake, clock, device, django_assert_num_queries):
    row_for(device, clock)
    with django_assert_num_queries(BASELINE):
        report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)
    assert report.delivered == 1


def test_claim__a_policy_costs_one_read_per_claim(quiet, fake, clock, device, django_assert_num_queries):
    row_for(device, clock)
    with django_assert_num_queries(BASELINE + 1):
        report = deliver_batch(clock=clock, owner="worker-a", ttl=TTL)
    assert report.delivered == 1

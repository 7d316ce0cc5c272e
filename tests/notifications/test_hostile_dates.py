"""Hostile dates: a send time at the calendar's ends, a huge TTL, a quiet-hours policy that raises or
answers nonsense. Each is refused at the door with a clear error, or handled; nothing stored crashes a
later read, and the admin list renders even a row stored before these checks."""

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.urls import reverse

from notifications.models import Device, Notification
from notifications.services import (
    MAX_TTL,
    device_register,
    notification_create,
    notification_send_to_topic,
    notification_send_to_user,
    notification_send_to_users,
)
from notifications.validation import SEND_AT_WINDOW

pytestmark = pytest.mark.django_db
CHANGELIST = reverse("admin:weave_notifications_notification_changelist")
FCM = {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}}

END_OF_CALENDAR = [
    datetime.max.replace(tzinfo=UTC),
    datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),  # past year 9999 once in UTC
    datetime(9999, 12, 31, tzinfo=UTC),
    datetime.min.replace(tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),  # before year 1 once in UTC
]


@pytest.fixture
def backends(push_settings, settings):
    webhook = {"BACKEND": "notifications.backends.webhook.WebhookBackend", "OPTIONS": {}}
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"default": webhook, "fcm": FCM}}


@pytest.fixture
def user(django_user_model):
    owner = django_user_model.objects.create_user("dates")
    device_register(user=owner, backend="default", token="phone-dates")
    return owner


def _sends(user):
    """Every service that takes `send_at`, as (name, call(send_at, ttl))."""
    return {
        "create": lambda at, ttl: notification_create(title="t", body="", device_token="tok-1", send_at=at, ttl=ttl),
        "create_device": lambda at, ttl: notification_create(
            title="t", body="", device=Device.objects.get(user=user), send_at=at, ttl=ttl
        ),
        "send_to_user": lambda at, ttl: notification_send_to_user(user=user, title="t", body="", send_at=at, ttl=ttl),
        "send_to_users": lambda at, ttl: notification_send_to_users(
            users=[user], title="t", body="", send_at=at, ttl=ttl
        ),
    }


@pytest.mark.parametrize("at", END_OF_CALENDAR, ids=lambda at: at.isoformat())
@pytest.mark.parametrize("ttl", [None, 3600, MAX_TTL])
@pytest.mark.parametrize("service", ["create", "create_device", "send_to_user", "send_to_users"])
def test_send_at__the_calendars_ends_are_refused_by_name_and_nothing_is_stored(push_settings, user, at, ttl, service):
    with pytest.raises(ValidationError) as caught:
        _sends(user)[service](at, ttl)

    assert "send_at" in caught.value.message_dict
    assert "within 366 days" in caught.value.message_dict["send_at"][0]
    assert not Notification.objects.exists()


@pytest.mark.parametrize("ttl", [0, -1, MAX_TTL + 1, 10**30, 2.5, True])
def test_ttl__outside_the_providers_range_is_refused_by_name(push_settings, user, ttl):
    for call in _sends(user).values():
        with pytest.raises(ValidationError) as caught:
            call(None, ttl)
        assert "ttl" in caught.value.message_dict
    assert not Notification.objects.exists()


def test_send_at__45_days_ahead_with_the_longest_ttl_is_stored_and_read_back(push_settings, user, clock):
    at = clock.current + timedelta(days=45)

    row = notification_create(title="t", body="", device_token="tok-1", send_at=at, ttl=MAX_TTL, clock=clock)

    row.refresh_from_db()
    assert (row.next_attempt_at, row.expires_at) == (at, at + timedelta(seconds=MAX_TTL))


def test_send_at__the_window_is_judged_from_the_clocks_now(push_settings, clock):
    edge = clock.current + SEND_AT_WINDOW
    notification_create(title="t", body="", device_token="tok-1", send_at=edge, clock=clock)
    with pytest.raises(ValidationError):
        notification_create(title="t", body="", device_token="tok-1", send_at=edge + timedelta(seconds=1), clock=clock)
    with pytest.raises(ValidationError):
        notification_create(title="t", body="", device_token="tok-1", send_at=clock.current - SEND_AT_WINDOW * 2,
                            clock=clock)  # fmt: skip
    assert Notification.objects.count() == 1


def test_send_at__a_topic_send_is_bounded_too(backends):
    with pytest.raises(ValidationError) as caught:
        notification_send_to_topic(backend="fcm", topic="news", title="t", body="", send_at=END_OF_CALENDAR[0])
    assert "send_at" in caught.value.message_dict and not Notification.objects.exists()


# --- a row stored before these checks still lists ---------------------------------------------------------


@pytest.mark.postgres
def test_admin_list__renders_a_row_whose_times_are_past_year_9999(admin_client, push_settings):
    row = notification_create(title="from before", body="", device_token="tok-1", ttl=60)
    with connection.cursor() as cursor:  # what an older Weave let through: PostgreSQL keeps it, Python cannot read it
        cursor.execute(
            "UPDATE weave_notifications_notification SET next_attempt_at = '10000-01-01 04:00:00+00', "
            "expires_at = '10000-01-01 05:00:00+00' WHERE id = %s",
            [row.pk],
        )

    page = admin_client.get(CHANGELIST)

    assert page.status_code == 200
    assert "from before" in page.content.decode() and "9999-12-30" in page.content.decode()


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Etc/GMT+12"])
def test_admin_list__renders_the_calendars_last_day_in_any_zone(admin_client, push_settings, settings, zone):
    row = notification_create(title="last day", body="", device_token="tok-1")
    last = datetime.max.replace(tzinfo=UTC) if zone.startswith("Pacific") else datetime.min.replace(tzinfo=UTC)
    Notification.objects.filter(pk=row.pk).update(next_attempt_at=last)
    settings.TIME_ZONE = zone

    page = admin_client.get(CHANGELIST)

    assert page.status_code == 200 and "last day" in page.content.decode()


# --- quiet hours: the site's policy is guarded at creation as in the worker --------------------------------


def by_stored_zone(user, at, priority):
    """A site's policy that reads the user's stored zone (here: first_name) and defers nothing."""
    ZoneInfo(user.first_name or "UTC")
    return None


def far_away(user, at, priority):
    return datetime.max.replace(tzinfo=UTC)


@pytest.fixture
def zones(push_settings, settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_QUIET_HOURS": f"{__name__}.by_stored_zone"}


def test_quiet_hours__a_policy_that_raises_for_one_device_is_a_clear_error_at_creation(zones, user):
    user.first_name = "Mars/Olympus_Mons"
    user.save()

    with pytest.raises(ValidationError) as caught:
        notification_create(title="t", body="", device=Device.objects.get(user=user))

    assert "ZoneInfoNotFoundError" in caught.value.message_dict["device"][0]
    assert not Notification.objects.exists()


@pytest.mark.parametrize("policy", ["far_away"])
def test_quiet_hours__a_deferral_past_the_window_is_the_policys_error_not_a_stored_row(push_settings, settings, user,
                                                                                       policy):  # fmt: skip
    settings.WEAVE = {**settings.WEAVE, "PUSH_QUIET_HOURS": f"{__name__}.{policy}"}

    result = notification_send_to_user(user=user, title="t", body="")

    assert list(result) == [] and [s.user_id for s in result.skipped_users] == [user.pk]
    assert "more than 366 days" in result.skipped_users[0].reason
    assert not Notification.objects.exists()


def test_quiet_hours__the_worker_guards_a_far_deferral_as_it_guards_a_raise(push_settings, settings, user, fake, clock):
    from notifications.delivery import deliver_batch

    notification_create(title="t", body="", device=Device.objects.get(user=user), clock=clock)
    settings.WEAVE = {**settings.WEAVE, "PUSH_QUIET_HOURS": f"{__name__}.far_away"}

    report = deliver_batch(clock=clock, owner="worker-a", ttl=30)

    assert report.delivered == 1 and Notification.objects.get().status == Notification.Status.DELIVERED


def _healthy_and_one_lost(django_user_model, healthy):
    users = django_user_model.objects.bulk_create(
        [django_user_model(username=f"u{n:05d}", first_name="Europe/Paris") for n in range(healthy)]
        + [django_user_model(username="lost", first_name="Mars/Olympus_Mons")]
    )
    users = list(django_user_model.objects.filter(username__in=[u.username for u in users]).order_by("pk"))
    Device.objects.bulk_create([Device(user=u, backend="default", token=f"phone-{u.username}") for u in users])
    return users


def test_send_to_users__one_users_broken_zone_skips_that_user_and_every_other_gets_exactly_one(
    zones, django_user_model
):
    users = _healthy_and_one_lost(django_user_model, 1199)
    lost = next(u for u in users if u.username == "lost")

    result = notification_send_to_users(users=django_user_model.objects.all(), title="t", body="", chunk=500)

    assert result.created == 1199 and result.skipped == []
    assert [s.user_id for s in result.skipped_users] == [lost.pk]
    assert "ZoneInfoNotFoundError" in result.skipped_users[0].reason
    per_user = Notification.objects.values_list("device__user", flat=True)
    assert sorted(per_user) == sorted(u.pk for u in users if u.pk != lost.pk)


def test_send_to_users__an_exception_midway_stores_nothing_and_a_retry_sends_each_once(
    zones, django_user_model, monkeypatch
):
    from notifications import services

    users = _healthy_and_one_lost(django_user_model, 1199)
    real = services._insert_still_active
    calls = []

    def fails_on_the_third_chunk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "_insert_still_active", fails_on_the_third_chunk)
    with pytest.raises(RuntimeError):
        notification_send_to_users(users=django_user_model.objects.all(), title="t", body="", chunk=500)
    assert len(calls) == 3 and not Notification.objects.exists()  # two chunks had been written, and are gone

    monkeypatch.setattr(services, "_insert_still_active", real)
    result = notification_send_to_users(users=django_user_model.objects.all(), title="t", body="", chunk=500)

    assert result.created == 1199 == Notification.objects.count()
    assert Notification.objects.values("device__user").distinct().count() == 1199
    assert len(users) == 1200

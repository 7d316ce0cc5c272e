"""Fan-out to a user's devices: a constant number of statements, no long locks, and one bad device spoils nothing."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.models import Device, Notification
from notifications.services import device_register, notification_send_to_user

from .conftest import BACKENDS, subscription

pytestmark = pytest.mark.django_db
APNS = "ab" * 32


def many_devices(user, n):
    """`n` devices on the four backends, stored directly (setup, not the code under test)."""
    u = user.pk
    tokens = {
        "default": lambda i: f"phone-{u}-{i}",
        "fcm": lambda i: f"fcm:{u}-{i:06d}-" + "x" * 20,
        "apns": lambda i: f"{u:08x}{i:056x}",
        "webpush": lambda i: subscription(f"https://fcm.googleapis.com/fcm/send/s{u}-{i}"),
    }
    aliases = list(tokens)
    rows = []
    for i in range(n):
        alias = aliases[i % 4]
        token = tokens[alias](i)
        if alias == "webpush":
            from notifications.backends.webpush import WebPushBackend

            token = WebPushBackend.canonical_token(token)
        rows.append(Device(user=user, backend=alias, token=token))
    Device.objects.bulk_create(rows, batch_size=500)


def statements(queries):
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]


@pytest.fixture
def roomy(settings):
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": BACKENDS,
        "PUSH_MAX_DEVICES_PER_USER": 10_000,
    }


def test_send_to_user__5000_devices_take_as_many_statements_as_4(roomy, user, bob):
    many_devices(user, 5000)
    many_devices(bob, 4)

    with CaptureQueriesContext(connection) as few:
        small = notification_send_to_user(user=bob, title="Hi", body="", ttl=60)
    with CaptureQueriesContext(connection) as lots:
        rows = notification_send_to_user(user=user, title="Hi", body="", ttl=60)

    assert len(small) == 4 and len(rows) == 5000 and rows.skipped == []
    assert len(statements(lots)) == len(statements(few)) <= 4, statements(lots)
    assert Notification.objects.filter(device__user=user, status="pending").count() == 5000
    # Every row came back with its key and its database-clock times.
    assert all(r.pk and r.next_attempt_at and r.expires_at for r in rows)
    assert len({r.idempotency_key for r in rows}) == 5000


def test_send_to_user__locks_device_rows_only_around_the_insert_and_never_for_update(roomy, user):
    many_devices(user, 40)

    with CaptureQueriesContext(connection) as queries:
        notification_send_to_user(user=user, title="Hi", body="")

    sql = statements(queries)
    assert not any("FOR UPDATE" in s for s in sql), sql
    table = f'INSERT INTO "{Notification._meta.db_table}"'
    locking = [i for i, s in enumerate(sql) if "FOR NO KEY UPDATE" in s]
    inserts = [i for i, s in enumerate(sql) if table in s]
    if connection.vendor == "postgresql":
        # Inside the test's transaction: one statement reads the devices, takes the lock and inserts, and
        # the lock is held until the transaction ends.
        assert locking == inserts == [0] and len(sql) == 1 and sql[0].startswith("WITH seen AS"), sql
    else:
        assert "FOR " not in sql[0] and len(inserts) == 1  # the first read takes no lock


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_send_to_user__outside_a_transaction_locks_device_rows_only_in_the_insert_and_never_for_update(roomy, user):
    from datetime import timedelta

    from notifications.queue import drain_request_name
    from weave.leases import DbNow
    from weave.models import WakeRequest

    many_devices(user, 40)
    # A drain is already asked for: the request is covered in the statement, and nothing runs after it.
    WakeRequest.objects.create(name=drain_request_name(), queued_until=DbNow(timedelta(hours=1)), requests=1)

    with CaptureQueriesContext(connection) as queries:
        rows = notification_send_to_user(user=user, title="Hi", body="")

    sql = statements(queries)
    table = f'INSERT INTO "{Notification._meta.db_table}"'
    assert not any("FOR UPDATE" in s for s in sql), sql
    locking = [i for i, s in enumerate(sql) if "FOR NO KEY UPDATE" in s]
    inserts = [i for i, s in enumerate(sql) if table in s]
    # The first read takes no lock; the one lock is taken in the statement that inserts, which commits by
    # itself: no BEGIN, no COMMIT, no locking read of its own.
    assert "FOR " not in sql[0] and locking == inserts == [1] and len(sql) == 2, sql
    assert sql[1].startswith("WITH locked AS")
    assert len(rows) == 40 and Notification.objects.filter(status="pending").count() == 40


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_send_to_users__one_transaction_in_which_each_chunk_is_its_read_and_one_statement(roomy, django_user_model):
    from datetime import timedelta

    from notifications.queue import drain_request_name
    from notifications.services import notification_send_to_users
    from weave.leases import DbNow
    from weave.models import WakeRequest

    users = [django_user_model.objects.create_user(f"user-{k}") for k in range(3)]
    for user in users:
        many_devices(user, 3)
    WakeRequest.objects.create(name=drain_request_name(), queued_until=DbNow(timedelta(hours=1)), requests=1)

    with CaptureQueriesContext(connection) as queries:
        result = notification_send_to_users(users=users, title="Hi", body="", chunk=2)

    sql = statements(queries)
    # All or nothing (a retry after an exception never duplicates): the chunks share one transaction, and
    # the drain is asked for once, after it commits.
    words = [s.split(" ", 1)[0] for s in sql]
    assert words[:6] == ["BEGIN", "SELECT", "WITH", "SELECT", "WITH", "COMMIT"], sql
    assert len(words) <= 7, sql
    assert result.created == 9 and result.skipped == []
    assert sorted(Notification.objects.values_list("device__user", flat=True)) == sorted([u.pk for u in users] * 3)


def test_send_to_user__an_unsendable_device_is_skipped_with_the_reason_and_the_others_get_theirs(roomy, user):
    good = [
        device_register(user=user, backend="apns", token=APNS),
        device_register(user=user, backend="default", token="phone-ok"),
    ]
    # Stored before today's checks (written directly, as an old release could have).
    pretty = Device.objects.create(user=user, backend="webpush", token=subscription(indent=2))
    legacy = [
        Device.objects.create(user=user, backend="default", token="two\nlines"),
        Device.objects.create(user=user, backend="webpush", token=subscription("http://127.0.0.1:5432/reset")),
        Device.objects.create(user=user, backend="apns", token="zz" * 32),
        Device.objects.create(user=user, backend="gone", token="phone-gone"),  # alias no longer configured
    ]

    rows = notification_send_to_user(user=user, title="Hi", body="")

    assert sorted(r.device_id for r in rows) == sorted([*(d.pk for d in good), pretty.pk])
    assert [s.device_id for s in rows.skipped] == [d.pk for d in legacy]
    reasons = {s.device_id: s.reason for s in rows.skipped}
    assert "visible ASCII" in reasons[legacy[0].pk]
    assert "https" in reasons[legacy[1].pk]
    assert "hexadecimal" in reasons[legacy[2].pk]
    assert "'gone'" in reasons[legacy[3].pk]
    # The pretty-printed subscription is sent in its compact form.
    (sent,) = [r for r in rows if r.device_id == pretty.pk]
    assert "\n" not in sent.device_token and json.loads(sent.device_token)["keys"] == json.loads(pretty.token)["keys"]


@pytest.mark.parametrize(("ttl", "title"), [("60", "Hi"), (0, "Hi"), (60, None), (60, "x\x00")])
def test_send_to_user__bad_content_is_a_validation_error_naming_the_field(roomy, user, ttl, title):
    device_register(user=user, backend="apns", token=APNS)
    with pytest.raises(ValidationError) as caught:
        notification_send_to_user(user=user, title=title, body="", ttl=ttl)
    assert set(caught.value.message_dict) == {"ttl" if title == "Hi" else "title"}
    assert Notification.objects.count() == 0


@pytest.mark.parametrize("bad", [type("FakeUser", (), {"pk": 1})(), type("Row", (), {"pk": 7, "username": "x"})()])
def test_send_to_user__the_user_is_type_checked(roomy, bad):
    with pytest.raises(ValidationError) as caught:
        notification_send_to_user(user=bad, title="Hi", body="")
    assert set(caught.value.message_dict) == {"user"}


def test_cap__registration_past_the_cap_is_refused_naming_the_user(settings, user, bob):
    settings.WEAVE = {"PUSH_URL": "https://push.example/send", "PUSH_MAX_DEVICES_PER_USER": 3}
    first = [device_register(user=user, backend="default", token=f"phone-{i}") for i in range(3)]

    with pytest.raises(ValidationError) as caught:
        device_register(user=user, backend="default", token="phone-4")

    assert set(caught.value.message_dict) == {"user"}
    assert "PUSH_MAX_DEVICES_PER_USER" in caught.value.message_dict["user"][0]
    assert Device.objects.filter(user=user).count() == 3
    # Re-registering a device the user has is fine, and another user has room of their own.
    assert device_register(user=user, backend="default", token="phone-0").pk == first[0].pk
    device_register(user=bob, backend="default", token="phone-4")
    # A deactivated device frees its place.
    from notifications.services import device_deactivate

    device_deactivate(device=first[1], reason="uninstalled")
    device_register(user=user, backend="default", token="phone-5")


def test_cap__a_user_over_the_cap_gets_it_on_the_most_recently_used_devices(settings, user):
    settings.WEAVE = {"PUSH_URL": "https://push.example/send", "PUSH_MAX_DEVICES_PER_USER": 2}
    old = [Device.objects.create(user=user, backend="default", token=f"phone-{i}") for i in range(4)]
    Device.objects.filter(pk=old[0].pk).update(last_used_at="2030-01-01T00:00:00Z")

    rows = notification_send_to_user(user=user, title="Hi", body="")

    assert sorted(r.device_id for r in rows) == sorted([old[0].pk, old[3].pk])
    assert [s.device_id for s in rows.skipped] == [old[1].pk, old[2].pk]
    assert all("PUSH_MAX_DEVICES_PER_USER" in s.reason for s in rows.skipped)


# --- many users: notification_send_to_users ---------------------------------------------------------------


def test_send_to_users__chunks_of_users_each_in_a_constant_number_of_statements(backends, django_user_model):
    from notifications.services import notification_send_to_users

    users = [django_user_model.objects.create_user(f"many-{n}") for n in range(30)]
    for n, user in enumerate(users):
        for k in range(4):
            Device.objects.create(user=user, backend="fcm", token=f"tok{n:03d}x{k}" + "A" * 20)
    with CaptureQueriesContext(connection) as small:
        notification_send_to_users(users=django_user_model.objects.filter(pk__in=[u.pk for u in users[:10]]),
                                   title="hi", body="", chunk=10)  # fmt: skip
    with CaptureQueriesContext(connection) as large:
        result = notification_send_to_users(
            users=django_user_model.objects.filter(pk__in=[u.pk for u in users[10:]]), title="hi", body="", chunk=10
        )

    assert result.created == 80 and result.skipped == []
    assert Notification.objects.count() == 120
    # 40 devices in one chunk: a handful of statements (read users, read devices, lock, insert), not one a
    # device; twice the users in chunks of 10 are twice the chunks, and no more statements per chunk.
    assert len(small.captured_queries) <= 10, [q["sql"][:60] for q in small.captured_queries]
    assert len(large.captured_queries) <= 2 * len(small.captured_queries)


def test_send_to_users__one_users_bad_device_never_spoils_the_others(backends, django_user_model):
    from notifications.services import notification_send_to_users

    good, bad = django_user_model.objects.create_user("good"), django_user_model.objects.create_user("bad")
    Device.objects.create(user=good, backend="fcm", token="good-token-" + "B" * 20)
    broken = Device.objects.create(user=bad, backend="fcm", token="no spaces allowed ☃")

    result = notification_send_to_users(users=[good, bad], title="hi", body="")

    assert result.created == 1 and [s.device_id for s in result.skipped] == [broken.pk]
    assert Notification.objects.get().device.user == good

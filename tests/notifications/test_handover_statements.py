"""The hand-over in the caller's process: which statements a push costs, and what the caller's transaction keeps.

Statements are counted, never timed. One at a time (autocommit) a raw-token push is its INSERT and the
drain request (on PostgreSQL one statement, the INSERT carrying the request's slot claim); in the
caller's transaction it is its INSERT alone, the drain being asked once at commit.
"""

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection, transaction
from django.db.models.signals import post_save, pre_save
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from notifications.models import Device, Notification
from notifications.services import notification_create, notification_send_to_user

# What the drain request costs: one statement on each database (on PostgreSQL it also carries the NOTIFY;
# on SQLite it is the slot's upsert, which claims the slot only if it is free).
DRAIN_REQUEST = ["WITH"] if connection.vendor == "postgresql" else ["INSERT"]

pytestmark = pytest.mark.django_db


def kinds(queries):
    return [q["sql"].split(None, 1)[0].upper() for q in queries.captured_queries]


@pytest.mark.django_db(transaction=True)
def test_create__one_at_a_time_is_its_insert_and_the_drain_request(push_settings):
    notification_create(device_token="device-0", title="Hi", body="")  # the first request makes the row

    with CaptureQueriesContext(connection) as queries:
        created = notification_create(device_token="device-1", title="Hi", body="")

    # No transaction, no read-back: the INSERT commits by itself and returns the key and the times. On
    # PostgreSQL the drain request's slot claim rides in the same statement (a data-modifying WITH).
    if connection.vendor == "postgresql":
        assert kinds(queries) == ["WITH"]
        (sql,) = [q["sql"] for q in queries.captured_queries]
        assert "INSERT INTO" in sql and "RETURNING" in sql and "UPDATE" in sql and "pg_notify" in sql
    else:
        assert kinds(queries) == ["INSERT", *DRAIN_REQUEST]
        assert "RETURNING" in queries.captured_queries[0]["sql"]
    stored = Notification.objects.get(pk=created.pk)
    assert (created.next_attempt_at, created.expires_at) == (stored.next_attempt_at, stored.expires_at)
    assert created.next_attempt_at is not None and not created._state.adding
    assert OrmQ.objects.count() == 1  # the drain asked for by the first push still covers the second


@pytest.mark.django_db(transaction=True)
def test_create__in_the_callers_transaction_is_one_insert_each_and_one_drain_request_at_commit(push_settings):
    notification_create(device_token="device-0", title="Hi", body="")  # the first request makes the row

    with CaptureQueriesContext(connection) as queries:
        with transaction.atomic():
            for i in range(5):
                notification_create(device_token=f"device-{i}", title="Hi", body="", ttl=60)
            inside = len(queries.captured_queries)

    assert kinds(queries)[:inside] == ["BEGIN", *["INSERT"] * 5]  # no savepoint, nothing read back
    assert kinds(queries)[inside:] == ["COMMIT", *DRAIN_REQUEST]  # once, after the commit
    assert Notification.objects.filter(expires_at__isnull=False).count() == 5
    assert [q.name() for q in OrmQ.objects.all()] == ["notifications.drain"]


@pytest.mark.django_db(transaction=True)
def test_create__a_refused_push_leaves_the_callers_transaction_usable(push_settings):
    with transaction.atomic():
        kept = notification_create(device_token="device-1", title="Hi", body="")
        with pytest.raises(ValidationError):
            notification_create(device_token="device-2", title="x" * 201, body="")
        after = notification_create(device_token="device-3", title="Hi", body="")

    assert sorted(Notification.objects.values_list("pk", flat=True)) == [kept.pk, after.pk]
    assert OrmQ.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_create__a_failed_insert_rolls_the_callers_transaction_back_and_asks_no_drain(push_settings):
    with pytest.raises(transaction.TransactionManagementError), transaction.atomic():
        notification_create(device_token="device-1", title="Hi", body="")
        with connection.cursor() as cursor:  # the INSERT of the next push will find its table gone
            cursor.execute(f"ALTER TABLE {Notification._meta.db_table} RENAME TO gone_for_a_moment")
        with pytest.raises(DatabaseError):
            notification_create(device_token="device-2", title="Hi", body="")
        Notification.objects.count()  # the caller's transaction was marked for rollback: refused

    assert not Notification.objects.exists() and not OrmQ.objects.exists()


def test_create__sends_the_model_signals_with_the_stored_row(push_settings):
    seen = []

    def before(sender, instance, raw, using, update_fields, **kwargs):
        seen.append(("pre", instance.pk, raw, update_fields))

    def after(sender, instance, created, raw, using, update_fields, **kwargs):
        seen.append(("post", instance.pk, created, instance.next_attempt_at is not None, raw, update_fields))

    pre_save.connect(before, sender=Notification)
    post_save.connect(after, sender=Notification)
    try:
        created = notification_create(device_token="device-1", title="Hi", body="")
    finally:
        pre_save.disconnect(before, sender=Notification)
        post_save.disconnect(after, sender=Notification)

    assert seen == [("pre", None, False, None), ("post", created.pk, True, True, False, None)]


def test_send_to_user__in_the_callers_transaction_takes_no_savepoint(push_settings, django_user_model):
    user = django_user_model.objects.create_user("alice")
    Device.objects.create(user=user, backend="default", token="phone-1")

    with CaptureQueriesContext(connection) as queries:
        rows = notification_send_to_user(user=user, title="Hi", body="")

    assert len(rows) == 1
    # The drain is asked when the test's transaction commits. On PostgreSQL, inside a transaction, one
    # statement reads the devices, locks them and inserts; elsewhere the read, the locking read and the
    # INSERT apart.
    if connection.vendor == "postgresql":
        assert kinds(queries) == ["WITH"], kinds(queries)
        assert "FOR NO KEY UPDATE" in queries.captured_queries[0]["sql"]
    else:
        assert kinds(queries) == ["SELECT", "SELECT", "INSERT"], kinds(queries)


@pytest.mark.django_db(transaction=True)
def test_send_to_user__refused_content_leaves_the_callers_transaction_usable(push_settings, django_user_model):
    user = django_user_model.objects.create_user("alice")
    Device.objects.create(user=user, backend="default", token="phone-1")

    with transaction.atomic():
        with pytest.raises(ValidationError):
            notification_send_to_user(user=user, title="", body="a body needs a title")
        rows = notification_send_to_user(user=user, title="Hi", body="")

    assert [r.pk for r in rows] == list(Notification.objects.values_list("pk", flat=True))
    assert OrmQ.objects.count() == 1


def _handover_statements():
    """Runs of each named prepared statement of this session that writes notifications or reads devices."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%weave_notifications_%%' ORDER BY name"
        )
        return [runs for (runs,) in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_hand_over_statements__are_prepared_once_per_connection_and_reused(push_settings, django_user_model):
    """The suite's settings allow prepared statements (demo.settings on a direct connection): PostgreSQL
    parses the hand-over's statements once per session, whatever the number of pushes."""
    connection.close()  # a new session: nothing prepared yet
    user = django_user_model.objects.create_user("alice")
    Device.objects.create(user=user, backend="default", token="prepared-device")
    for i in range(3):
        notification_create(device_token=f"prepared-{i}", title="Hi", body="")
    assert _handover_statements() == [3]  # the INSERT with the drain request's claim
    for _ in range(3):
        notification_send_to_user(user=user, title="Hi", body="")
    # The device read and the fan-out's locked INSERT, each its one named statement.
    assert _handover_statements() == [3, 3, 3]
    assert Notification.objects.count() == 6

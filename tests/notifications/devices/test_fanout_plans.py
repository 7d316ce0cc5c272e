"""The fan-out's prepared statements are planned once per connection for a one-user send, not on every run.

PostgreSQL keeps a prepared statement's generic plan after five runs only when it costs no more than the
plans made for each run's own values. A parameter compared with `= ANY(...)` is estimated as an array of
several elements in the generic plan, so on a device table of a site's size a one-user send's statements
were planned again on every run. With the one user of the device read, and the devices of a few rows'
INSERT, as plain parameters, the generic plan is kept. A send to several users still takes arrays, and
every shape still stores what it should.
"""

import pytest
from django.db import connection

from notifications.models import Device, Notification
from notifications.services import notification_send_to_user, notification_send_to_users

pytestmark = [
    pytest.mark.django_db(transaction=True),  # outside a transaction: the statement that commits by itself
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plan cache"),
]
CROWD = 20_000
SENDS = 8  # more than the five custom plans PostgreSQL makes before it weighs the generic one


def _fanout_plans():
    """(generic, custom) plans of this session's prepared statements on the device table, by their start."""
    connection.ensure_connection()
    threshold = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = None  # or this statement would be prepared too
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT left(statement, 20), generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE %s ORDER BY statement",
                ["%weave_notifications_device%"],
            )
            return {start: (generic, custom) for start, generic, custom in cursor.fetchall()}
    finally:
        connection.connection.prepare_threshold = threshold


def _crowd():
    """Other users' devices, as many as a site has, with fresh statistics. On a table of a few pages every
    plan is a scan of all of them, and the generic plan costs what a custom one does whatever the text."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, is_staff,"
            " is_active, date_joined) SELECT '', false, 'crowd-' || g, '', '', '', false, true, now()"
            " FROM generate_series(1, %s) AS g",
            [CROWD],
        )
        cursor.execute(
            "INSERT INTO weave_notifications_device (user_id, backend, token, platform, active, created_at,"
            " deactivation_reason) SELECT id, 'default', 'crowd-' || id, '', true, now(), ''"
            " FROM auth_user WHERE username LIKE 'crowd-%%'"
        )
        cursor.execute("ANALYZE auth_user, weave_notifications_device")


def _people(django_user_model, count, devices_each):
    people = [django_user_model.objects.create_user(f"planned-{i}") for i in range(count)]
    Device.objects.bulk_create(
        [Device(user=p, backend="default", token=f"plan-{p.pk}-{d}") for p in people for d in range(devices_each)]
    )
    return people


@pytest.mark.parametrize("devices_each", [1, 3])
def test_one_user_sends__keep_one_plan_of_each_statement(django_user_model, devices_each):
    from weave.leases.binding import may_prepare

    assert may_prepare(connection), "the suite's database must let the hand-over prepare its statements"
    _crowd()
    people = _people(django_user_model, SENDS, devices_each)
    connection.close()  # a new session: its prepared statements are this test's alone
    for person in people:
        result = notification_send_to_user(user=person, title="Hi", body="")
        assert len(result) == devices_each
    plans = _fanout_plans()
    assert set(plans) == {'SELECT "id", "backen', "WITH locked AS MATER"}, plans
    for start, (generic, custom) in plans.items():
        assert generic >= SENDS - 5 and custom <= 5, (start, generic, custom)
    # A few rows go as one VALUES list of plain parameters, not as arrays (psycopg adapts an array in Python).
    inserts = _prepared_texts("WITH locked AS MATER%")
    assert len(inserts) == 1 and "(VALUES " in inserts[0] and "unnest(" not in inserts[0], inserts
    stored = Notification.objects.filter(device__user__in=people).values_list("device__user", flat=True)
    assert sorted(stored) == sorted(p.pk for p in people for _ in range(devices_each))


def _prepared_texts(start):
    """The whole text of this session's prepared statements that begin like `start` (a LIKE pattern)."""
    threshold = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = None  # or this statement would be prepared too
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", [start])
            return [text for (text,) in cursor.fetchall()]
    finally:
        connection.connection.prepare_threshold = threshold


def test_sends_to_several_users__still_store_a_row_per_active_device(django_user_model):
    people = _people(django_user_model, 3, 2)
    Device.objects.filter(user=people[1], token__endswith="-0").update(active=False)
    result = notification_send_to_users(users=people, title="Hi", body="")
    assert result.created == 5
    stored = Notification.objects.values_list("device__token", flat=True)
    assert sorted(stored) == sorted(
        f"plan-{p.pk}-{d}" for p in people for d in range(2) if not (p == people[1] and d == 0)
    )


@pytest.mark.parametrize("devices_each", [1, 3])
def test_one_user_sends_in_a_transaction__keep_one_plan_of_their_one_statement(django_user_model, devices_each):
    from django.db import transaction

    _crowd()
    people = _people(django_user_model, SENDS, devices_each)
    connection.close()  # a new session: its prepared statements are this test's alone
    with transaction.atomic():  # one statement reads, locks and inserts (`read_and_insert`)
        for person in people:
            assert len(notification_send_to_user(user=person, title="Hi", body="")) == devices_each
        plans = _fanout_plans()
    assert set(plans) == {"WITH seen AS MATERIA"}, plans
    ((generic, custom),) = plans.values()
    assert generic >= SENDS - 5 and custom <= 5, (generic, custom)
    stored = Notification.objects.filter(device__user__in=people).values_list("device__user", flat=True)
    assert sorted(stored) == sorted(p.pk for p in people for _ in range(devices_each))

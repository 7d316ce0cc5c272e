"""The INSERT of a new notification made once per process (`notifications.insert`), and the drain request
it carries outside a transaction. PostgreSQL only: elsewhere the ORM builds the INSERT as before.

Identity with the ORM is checked two ways: the statement and its adapted parameters against what the
ORM's compiler makes for the same instance, and a stored row made each way, column by column.
"""

import logging
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.db.models.sql import InsertQuery
from django.utils import timezone
from django_q.models import OrmQ

from notifications import insert
from notifications.models import Device, Notification
from notifications.queue import drain_request_name
from notifications.services import _insert_many, notification_create
from weave import wake
from weave.leases import DbNow
from weave.models import WakeRequest

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

SEND_AT = datetime(2031, 5, 4, 3, 2, 1, 123456, tzinfo=UTC)
FROZEN = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _shapes(device: Device | None) -> list[dict]:
    base = {
        "device_token": "token-1", "backend": "default", "title": "Hi", "body": "there", "priority": "normal",
        "created_at": DbNow(),  # as the services give it
    }  # fmt: skip
    return [
        {**base, "next_attempt_at": DbNow(), "expires_at": None},
        {**base, "next_attempt_at": DbNow(), "expires_at": DbNow(timedelta(seconds=90))},
        {**base, "next_attempt_at": SEND_AT, "expires_at": SEND_AT + timedelta(seconds=60)},
        {
            **base, "device": device, "priority": "high", "collapse_key": "news", "last_error": "deferred: quiet hours",
            "data": {"a": "1", "nested": {"ü": [1, 2.5, None, True]}}, "options": {"badge": 3, "sound": "ping"},
            "next_attempt_at": SEND_AT, "expires_at": None,
        },
        {
            **base, "title": "it's \"quoted\" \\ back\\slash \U0001f600", "body": "line\nnext\t{} NULL, \\N",
            "collapse_key": "", "data": {"q": "it's", "b": "\\"}, "next_attempt_at": DbNow(), "expires_at": None,
        },
    ]  # fmt: skip


def _orm_statement(notification: Notification) -> tuple[str, list]:
    """What Django's compiler makes of the same INSERT (as `_insert_many` runs it), values adapted."""
    meta = Notification._meta
    query = InsertQuery(Notification)
    query.insert_values([f for f in meta.concrete_fields if not f.primary_key and not f.generated], [notification])
    compiler = query.get_compiler(using="default")
    compiler.returning_fields = [meta.pk, *(meta.get_field(name) for name in insert.CLOCK_FIELDS)]
    ((sql, params),) = compiler.as_sql()
    return sql, list(params)


def _comparable(params: list) -> list:
    # psycopg's Jsonb wrapper has no equality of its own: compare what it wraps, and how it dumps it.
    return [(type(p).__name__, p.obj, p.dumps(p.obj)) if isinstance(p, psycopg.types.json.Jsonb) else p for p in params]


def test_the_statement_and_its_values_are_the_orms(monkeypatch, django_user_model):
    device = Device.objects.create(user=django_user_model.objects.create_user("alice"), backend="default", token="t")
    monkeypatch.setattr(timezone, "now", lambda: FROZEN)  # the creation time pre_save sets, alike both ways
    for fields in _shapes(device):
        key = uuid.uuid4()
        ours = insert.insert_sql(Notification(**fields, idempotency_key=key), "default")
        theirs = _orm_statement(Notification(**fields, idempotency_key=key))
        assert ours is not None
        assert ours[0] == theirs[0]
        assert _comparable(ours[1]) == _comparable(theirs[1])
        assert [type(p) for p in ours[1]] == [type(p) for p in theirs[1]]


def test_a_row_made_this_way_is_the_row_the_orm_makes_column_by_column(django_user_model):
    device = Device.objects.create(user=django_user_model.objects.create_user("alice"), backend="default", token="t")
    for fields in _shapes(device):
        old, new = Notification(**fields), Notification(**fields)
        _insert_many([old], using="default")
        assert insert.insert(new, "default") == (False, False)
        stored_old = Notification.objects.values().get(pk=old.pk)
        stored_new = Notification.objects.values().get(pk=new.pk)
        differ = {"id", "idempotency_key", "created_at"}
        if isinstance(fields["next_attempt_at"], DbNow):
            differ |= {"next_attempt_at", "expires_at"}  # the database's clock, read by each statement
            assert stored_new["next_attempt_at"] is not None
            assert (stored_new["expires_at"] is None) == (stored_old["expires_at"] is None)
        assert {k: v for k, v in stored_old.items() if k not in differ} == {
            k: v for k, v in stored_new.items() if k not in differ
        }
        assert set(stored_old) == set(stored_new)
        for row in (stored_old, stored_new):
            assert isinstance(row["idempotency_key"], uuid.UUID) and row["created_at"].tzinfo is not None
        # The instance afterwards, as `_insert_many` leaves it: key and clock times from RETURNING.
        for made in (old, new):
            stored = Notification.objects.get(pk=made.pk)
            assert (made.next_attempt_at, made.expires_at) == (stored.next_attempt_at, stored.expires_at)
            assert (made._state.adding, made._state.db) == (False, "default")
        assert type(old.pk) is type(new.pk) and type(old.next_attempt_at) is type(new.next_attempt_at)


def test_a_clock_the_orm_must_compile_is_left_to_the_orm(clock):
    row = Notification(device_token="t", backend="default", title="Hi", next_attempt_at=clock.now())
    assert insert.insert_sql(row, "default") is None
    assert insert.insert(row, "default") is None and row.pk is None


# --- the drain request in the same statement (autocommit) ------------------------------------------------


def _rows_seen_by_another_connection() -> int:
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:
        return other.execute(f"SELECT count(*) FROM {Notification._meta.db_table}").fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_the_first_push_ever_makes_the_request_row_and_enqueues(push_settings):
    assert not WakeRequest.objects.exists()
    notification_create(device_token="device-1", title="Hi", body="")
    (row,) = WakeRequest.objects.all()
    assert (row.name, row.requests) == (drain_request_name(), 1) and row.queued_until is not None
    assert OrmQ.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_free_slot_is_taken_in_the_insert_and_the_broker_is_asked_after_its_commit(push_settings, monkeypatch):
    notification_create(device_token="device-0", title="Hi", body="")  # makes the request row
    wake.free_slot(drain_request_name())  # the drain started: the slot is free again
    seen = []
    monkeypatch.setattr("weave.wake.async_task", lambda *a, **k: seen.append(_rows_seen_by_another_connection()))

    notification_create(device_token="device-1", title="Hi", body="")
    assert seen == [2]  # enqueued once, and only once the new row was visible to everyone
    assert WakeRequest.objects.get().requests == 2

    notification_create(device_token="device-2", title="Hi", body="")
    assert seen == [2]  # the slot is held now: covered, no second task
    assert WakeRequest.objects.get().requests == 2


@pytest.mark.django_db(transaction=True)
def test_a_covered_push_tells_the_lingering_task_and_a_winning_one_announces_its_task(push_settings):
    notification_create(device_token="device-0", title="Hi", body="")
    raw = wake.open_listener()
    try:
        notification_create(device_token="device-1", title="Hi", body="")  # covered
        covered = [n.payload for n in raw.notifies(timeout=5.0, stop_after=1)]
        wake.free_slot(drain_request_name())
        notification_create(device_token="device-2", title="Hi", body="")  # wins: a new task
        won = [n.payload for n in raw.notifies(timeout=5.0, stop_after=1)]
    finally:
        raw.close()
    assert covered == [wake.ARRIVAL]
    assert won == [""]
    assert OrmQ.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_refuses_after_the_insert_frees_the_slot_and_keeps_the_row(push_settings, monkeypatch, caplog):
    notification_create(device_token="device-0", title="Hi", body="")
    wake.free_slot(drain_request_name())

    def broken(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr("weave.wake.async_task", broken)
    with caplog.at_level(logging.WARNING, logger="weave.wake"):
        created = notification_create(device_token="device-1", title="Hi", body="")
    assert Notification.objects.filter(pk=created.pk).exists()
    assert "event=enqueue_failed" in caplog.text
    assert WakeRequest.objects.get().queued_until is None


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_the_insert_carries_no_claim_and_the_request_waits_for_commit(push_settings):
    notification_create(device_token="device-0", title="Hi", body="")
    wake.free_slot(drain_request_name())
    with transaction.atomic():
        notification_create(device_token="device-1", title="Hi", body="")
        # The request row is not touched until the commit: other senders never wait for this transaction.
        assert WakeRequest.objects.get().queued_until is None
    assert WakeRequest.objects.get().queued_until is not None
    assert OrmQ.objects.count() == 2


def test_a_one_device_fan_out_stores_what_a_two_device_one_through_the_orm_stores(push_settings, django_user_model):
    from notifications.services import notification_send_to_user

    one, two = (django_user_model.objects.create_user(name) for name in ("one", "two"))
    Device.objects.create(user=one, backend="default", token="one-phone")
    for k in range(2):
        Device.objects.create(user=two, backend="default", token=f"two-phone-{k}")
    content = {"title": "Hi", "body": "there", "data": {"k": "v"}, "ttl": 120, "priority": "high"}

    (mine,) = notification_send_to_user(user=one, **content)  # one row: the text made once
    theirs = notification_send_to_user(user=two, **content)  # two rows: the ORM's multi-row INSERT

    differ = {"id", "idempotency_key", "created_at", "next_attempt_at", "expires_at", "device_id", "device_token"}
    stored = [Notification.objects.values().get(pk=n.pk) for n in (mine, *theirs)]
    assert [{k: v for k, v in row.items() if k not in differ} for row in stored[1:]] == [
        {k: v for k, v in stored[0].items() if k not in differ}
    ] * 2
    for row in stored:
        assert abs(row["expires_at"] - row["next_attempt_at"] - timedelta(seconds=120)) < timedelta(seconds=1)
    assert (mine.pk, mine.next_attempt_at, mine.expires_at, mine._state.adding) == (
        stored[0]["id"], stored[0]["next_attempt_at"], stored[0]["expires_at"], False,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_an_expression_a_pre_save_receiver_sets_is_compiled_by_the_orm(push_settings):
    from django.db.models import Value
    from django.db.models.functions import Concat
    from django.db.models.signals import pre_save

    def shout(sender, instance, **kwargs):
        instance.body = Concat(Value("made "), Value("in SQL"))

    pre_save.connect(shout, sender=Notification)
    try:
        created = notification_create(device_token="device-1", title="Hi", body="plain")
    finally:
        pre_save.disconnect(shout, sender=Notification)
    assert Notification.objects.get(pk=created.pk).body == "made in SQL"


@pytest.fixture(params=["values", "arrays"])
def fan_out_form(request, monkeypatch):
    """The fan-out's statement in each of its forms: a few rows as plain parameters, or one array per column."""
    from notifications import locked_insert

    monkeypatch.setattr(locked_insert, "FEW_ROWS", 1000 if request.param == "values" else 0)
    return request.param


def test_the_fan_outs_one_statement_stores_the_rows_the_orm_stores_column_by_column(django_user_model, fan_out_form):
    from notifications import locked_insert
    from notifications.queue import drain_claim_sql

    alice = django_user_model.objects.create_user("alice")
    kinds = _shapes(None)
    devices = [Device.objects.create(user=alice, backend="default", token=f"t{k}") for k in range(len(kinds))]
    shapes = [{**fields, "device": device} for fields, device in zip(kinds, devices, strict=True)]
    old = [Notification(**fields) for fields in shapes]
    new = [Notification(**fields) for fields in shapes]  # one statement for all of them: the clocks differ by row
    _insert_many(old, using="default")
    claim = drain_claim_sql(only_if=locked_insert.INSERTED)
    # No request row yet: the claim makes it, its slot taken, in the same statement.
    assert locked_insert.insert_locked(new, [alice.pk], "default", claim=claim) == (True, False)
    assert WakeRequest.objects.get().requests == 1
    for fields, made_old, made_new in zip(shapes, old, new, strict=True):
        stored_old = Notification.objects.values().get(pk=made_old.pk)
        stored_new = Notification.objects.values().get(pk=made_new.pk)
        differ = {"id", "idempotency_key", "created_at"}
        if isinstance(fields["next_attempt_at"], DbNow):
            differ |= {"next_attempt_at", "expires_at"}  # the database's clock, read per row
            assert stored_new["next_attempt_at"] is not None
            assert (stored_new["expires_at"] is None) == (stored_old["expires_at"] is None)
        if fields["expires_at"] is not None and isinstance(fields["expires_at"], DbNow):
            gap = stored_new["expires_at"] - stored_new["next_attempt_at"]
            assert abs(gap - timedelta(seconds=90)) < timedelta(seconds=1)
        assert {k: v for k, v in stored_old.items() if k not in differ} == {
            k: v for k, v in stored_new.items() if k not in differ
        }
        assert set(stored_old) == set(stored_new)
        assert isinstance(stored_new["idempotency_key"], uuid.UUID) and stored_new["created_at"].tzinfo is not None
        stored = Notification.objects.get(pk=made_new.pk)
        assert (made_new.next_attempt_at, made_new.expires_at) == (stored.next_attempt_at, stored.expires_at)
        assert (made_new._state.adding, made_new._state.db) == (False, "default")
        assert type(made_old.pk) is type(made_new.pk)
        assert type(made_old.next_attempt_at) is type(made_new.next_attempt_at)
    # The keys run in the order of the rows given, as the ORM's multi-row INSERT makes them.
    assert [n.pk for n in new] == sorted(n.pk for n in new)


def test_a_value_too_long_for_its_column_is_refused_by_the_one_statement_as_by_the_orm(django_user_model, fan_out_form):
    from django.db import DataError

    from notifications import locked_insert
    from notifications.queue import drain_claim_sql

    alice = django_user_model.objects.create_user("alice")
    device = Device.objects.create(user=alice, backend="default", token="t")
    row = Notification(**{**_shapes(device)[0], "device": device, "title": "x" * 201})
    claim = drain_claim_sql(only_if=locked_insert.INSERTED)
    with pytest.raises(DataError), transaction.atomic():
        locked_insert.insert_locked([row], [alice.pk], "default", claim=claim)
    assert row.pk is None and not Notification.objects.exists()

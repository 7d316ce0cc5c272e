"""weave.leases.prepare: each field's preparer gives exactly what the field's get_db_prep_save gives.

Compared value by value (the same type, the same value, the same warning, the same exception) for
every concrete field of every installed model, the ones the group statements write among them.
"""

import copy
import datetime
import decimal
import warnings
import zoneinfo
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.test import override_settings
from django.utils.translation import gettext_lazy

from notifications.models import DeliveryAttempt, Notification
from weave.leases.bulk import _array_ready
from weave.leases.prepare import preparer

UTC = datetime.UTC
AWARE = datetime.datetime(2026, 12, 2, 4, 5, 6, 789, tzinfo=UTC)
VALUES: list[Any] = [
    None, 0, 1, -7, 2**31, 2**62, True, False, 1.5, float("nan"), decimal.Decimal("3"),
    "", "x", "12", "ü" * 300, gettext_lazy("lazy"), Notification.Status.DELIVERED, DeliveryAttempt.Outcome.UNKNOWN,
    AWARE, AWARE.astimezone(zoneinfo.ZoneInfo("Pacific/Chatham")), datetime.datetime(2026, 12, 2, 4, 5, 6),
    datetime.date(2026, 12, 2), b"raw", {"a": 1}, [1, 2],
]  # fmt: skip

# What the lease core's group statements write: a finish's keys and fields, a receipt's columns.
WRITTEN = [
    (Notification, name)
    for name in ("id", "owner", "fence", "status", "attempts", "last_error", "provider_message_id",
                 "delivered_at", "next_attempt_at", "lease_expires_at")
] + [
    (DeliveryAttempt, name)
    for name in ("notification", "owner", "fence", "started_at", "finished_at", "http_status", "latency_ms",
                 "outcome", "reason", "number", "retry_at")
]  # fmt: skip


def _outcome(call: Any, value: Any) -> tuple[Any, ...]:
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        try:
            result = call(value)
        except Exception as exc:  # noqa: BLE001 - the same refusal is part of the same answer
            return ("raised", type(exc), str(exc), [str(w.message) for w in heard])
    same = result if result == result else "nan"  # NaN equals nothing, not even itself
    if hasattr(result, "obj"):
        same = result.obj  # psycopg's Jsonb: equal only to itself
    return (type(result), same, [str(w.message) for w in heard])


def _fields() -> list[Any]:
    return [field for model in apps.get_models() for field in model._meta.concrete_fields]


@pytest.mark.django_db
@pytest.mark.parametrize("use_tz", [True, False], ids=["USE_TZ", "no-USE_TZ"])
def test_preparer__is_get_db_prep_save_for_every_field_and_value(use_tz):
    with override_settings(USE_TZ=use_tz):
        for field in _fields():
            fast = preparer(field, connection)
            for value in VALUES:
                slow = _outcome(lambda v, f=field: f.get_db_prep_save(v, connection), value)
                assert _outcome(fast, value) == slow, (field.model.__name__, field.name, value)


TYPICAL = {"CharField": "x", "TextField": "x", "DateTimeField": AWARE}  # any other served field: an int


@pytest.mark.django_db
@pytest.mark.parametrize("model,name", WRITTEN, ids=[f"{m.__name__}.{n}" for m, n in WRITTEN])
def test_preparer__takes_no_detour_through_get_db_prep_save_for_a_column_the_group_statements_write(model, name):
    field = copy.copy(model._meta.get_field(name))
    detours = []
    field.get_db_prep_save = lambda value, connection: detours.append(value)  # seen by the preparer made next
    assert _array_ready(field)
    kind = type(field.target_field if field.is_relation else field).__name__
    preparer(field, connection)(TYPICAL.get(kind, 5))
    assert detours == []


@pytest.mark.django_db
def test_preparer__on_psycopg_3_an_integer_keeps_the_type_naming_its_size():
    # What made a pass-through wrong: Django wraps ints for psycopg 3, and the wrapper names the SQL type.
    if connection.vendor != "postgresql":
        pytest.skip("the psycopg adapters are PostgreSQL's")
    attempts = preparer(Notification._meta.get_field("attempts"), connection)(3)
    fence = preparer(Notification._meta.get_field("fence"), connection)(3)
    assert (type(attempts).__name__, type(fence).__name__) == ("Int4", "Int8")

"""weave.leases.binding.load_utc_times_in_c: psycopg's C timestamptz loader, only where it gives what Django's gives."""

import datetime

import pytest
from django.db import connection, transaction
from django.test import override_settings

from weave.leases import DatabaseClock
from weave.leases.binding import load_utc_times_in_c

TIMESTAMPTZ_OID = 1184  # psycopg.postgres.types["timestamptz"].oid
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's loaders are PostgreSQL's"),
]

TIMES = [
    "2026-12-02 04:05:06.789123+00", "2026-12-02 04:05:06+00", "2026-06-30 23:59:59.999999-09:30",
    "2026-03-29 02:30:00+02", "2000-02-29 12:00:00.5+14", "1970-01-01 00:00:00+00", "1900-01-01 00:00:00+00",
    "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999+00", "infinity", "-infinity", "0044-03-15 12:00:00 BC",
]  # fmt: skip


def _read(cursor, text):
    try:
        cursor.execute("SELECT %s::timestamptz", [text])
        (value,) = cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - the same refusal is part of the same answer
        return ("raised", type(exc))
    return (type(value), value, value.tzinfo)


def _all(use_c):
    read = []
    for text in TIMES:
        with transaction.atomic(), connection.cursor() as cursor:  # a refused value ends its own transaction only
            taken = load_utc_times_in_c(connection, cursor.cursor) if use_c else False
            read.append((taken, _read(cursor, text)))
    return read


def test_c_loader__reads_every_time_as_django_does_in_the_same_tzinfo_object():
    django_s, c_s = _all(use_c=False), _all(use_c=True)
    assert all(taken for taken, _ in c_s)  # the C loader was used: the comparison compared something
    assert [value for _, value in c_s] == [value for _, value in django_s]
    assert all(value[2] is datetime.UTC for _, value in c_s if value[0] is datetime.datetime)


def test_c_loader__is_declined_where_the_session_or_the_site_is_not_in_utc():
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL TIME ZONE 'Europe/Paris'")
        assert not load_utc_times_in_c(connection, cursor.cursor)
        (value,) = (cursor.execute("SELECT %s::timestamptz", [TIMES[0]]), cursor.fetchone())[1]
        assert value.tzinfo is datetime.UTC  # Django's loader still says what it always said
    with override_settings(TIME_ZONE="Pacific/Chatham", USE_TZ=True):
        settings_dict = connection.settings_dict
        previous = settings_dict.get("TIME_ZONE")
        settings_dict["TIME_ZONE"] = "Pacific/Chatham"
        connection.__dict__.pop("timezone", None)
        try:
            with connection.cursor() as cursor:
                assert not load_utc_times_in_c(connection, cursor.cursor)
        finally:
            settings_dict["TIME_ZONE"] = previous
            connection.__dict__.pop("timezone", None)
    with override_settings(USE_TZ=False), connection.cursor() as cursor:
        assert not load_utc_times_in_c(connection, cursor.cursor)


def test_c_loader__reads_the_claims_returning():
    # The claim's statement (weave.leases.returning) reads its times through psycopg's loader.
    import psycopg
    from psycopg.pq import Format

    from tests.factories import JobFactory
    from tests.leasetest.models import Job

    loaders = []

    def watch(execute, sql, params, many, context):
        if "RETURNING" in sql:
            loaders.append(context["cursor"].cursor.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT))
        return execute(sql, params, many, context)

    JobFactory()
    with connection.execute_wrapper(watch):
        Job.objects.claim_batch(owner="me", ttl=30, limit=1, clock=DatabaseClock())
    assert loaders == [psycopg.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)]

"""The stall fault lets a frozen worker go when it holds any open transaction, not only one on its row."""

import os

import psycopg
import pytest
from django.db import connection

from demo.management.commands.weave_demo_stalls import Command, _client_ports
from notifications.models import Notification
from notifications.services import notification_create

pytestmark = pytest.mark.django_db(transaction=True)


def _connect() -> psycopg.Connection:
    given = connection.settings_dict
    return psycopg.connect(
        host=given["HOST"] or "127.0.0.1", port=given["PORT"] or 5432, user=given["USER"], dbname=given["NAME"]
    )


def test_probe__an_open_transaction_on_another_row_counts_as_frozen_mid_write():
    if connection.vendor != "postgresql":
        pytest.skip("the open-transaction probe reads pg_stat_activity")
    row = notification_create(device_token="probe-device", title="t", body="b")
    other = notification_create(device_token="probe-other", title="t", body="b")
    held = _connect()
    try:
        assert Command()._frozen_inside_a_transaction(Notification, row.pk, os.getpid()) is False
        with held.transaction():
            # This process holds a lock on another row only: the row under test is free to lock.
            table = Notification._meta.db_table
            held.execute(f"UPDATE {table} SET title = 'x' WHERE id = %s", [other.pk])  # noqa: S608 (our own table)
            assert Command()._frozen_inside_a_transaction(Notification, row.pk, os.getpid()) is True
        assert Command()._frozen_inside_a_transaction(Notification, row.pk, os.getpid()) is False
    finally:
        held.close()


def test_probe__the_ports_of_a_process_include_its_database_connection():
    if connection.vendor != "postgresql":
        pytest.skip("needs a TCP connection to PostgreSQL")
    held = _connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT client_port FROM pg_stat_activity WHERE pid = %s", [held.info.backend_pid])
            (port,) = cursor.fetchone()
        assert port in _client_ports(os.getpid())
        assert _client_ports(2**22 + 1) == []  # no such process
    finally:
        held.close()

"""The fan-out's one statement (PostgreSQL) racing a hand-over or a deactivation.

`notification_send_to_user` locks the planned devices inside the statement that inserts their rows
(`notifications.locked_insert`), so there is no moment in Python at which the locks are held. The races are
staged in the database instead, and each test shows from `pg_blocking_pids` that the session it names did
wait for the other, before it shows the outcome:

- the change commits first: the send's statement waits for the device row, re-reads it once the change
  has committed, and leaves the device out (no row, the device named in `skipped`, no drain request);
- the send locks first: a hand-over runs into the send's device lock (the send is held at its drain
  request, whose row another session keeps locked), waits until the send's rows are committed, and then
  ends them unsent with the reason.
"""

import contextlib
import threading
import time

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django_q.models import OrmQ

from notifications.models import Device, Notification
from notifications.queue import drain_request_name
from notifications.services import SkippedDevice, device_deactivate, device_register, notification_send_to_user
from tests.threads import run_threads
from weave.models import WakeRequest

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
TOKEN = "phone-shared-install"
WAIT = 10.0  # seconds a staged session may take to reach its lock on a loaded machine


def _session() -> psycopg.Connection:
    return psycopg.connect(**connection.get_connection_params(), autocommit=True)


def _blocks(watcher: psycopg.Connection, waiting: int, holder: int) -> bool:
    """Whether the session `waiting` comes to wait for a lock `holder` holds, within WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if watcher.execute("SELECT %s = ANY(pg_blocking_pids(%s))", [holder, waiting]).fetchone()[0]:
            return True
        time.sleep(0.01)
    return False


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def _free_drain_slot() -> WakeRequest:
    return WakeRequest.objects.create(name=drain_request_name(), queued_until=None, requests=0)


@pytest.mark.parametrize("inside", [False, True], ids=["autocommit", "in-a-transaction"])
@pytest.mark.parametrize("change", ["handover", "deactivation"])
def test_a_change_that_commits_first_is_waited_for_and_its_device_left_out(push_settings, change, inside):
    alice, bob = (get_user_model().objects.create_user(name) for name in ("alice", "bob"))
    device = device_register(user=alice, backend="default", token=TOKEN)
    slot = _free_drain_slot()
    pids: dict[str, int] = {}
    changed, commit = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}
    sent = []

    def act(name: str) -> None:
        if name == "change":
            pids["change"] = _backend_pid()
            with transaction.atomic():  # the change holds the device row until the watcher lets it commit
                if change == "handover":
                    device_register(user=bob, backend="default", token=TOKEN)
                else:
                    device_deactivate(device=device, reason="signed out")
                changed.set()
                assert commit.wait(WAIT * 2)
        elif name == "send":
            assert changed.wait(WAIT)
            pids["send"] = _backend_pid()
            with transaction.atomic() if inside else contextlib.nullcontext():
                sent.append(notification_send_to_user(user=alice, title="For alice only", body=""))
        else:
            assert changed.wait(WAIT)
            with _session() as watcher:
                while "send" not in pids:
                    time.sleep(0.01)
                seen["send waited for the change"] = _blocks(watcher, pids["send"], pids["change"])
            commit.set()

    run_threads(act, ["change", "send", "watch"])

    assert seen == {"send waited for the change": True}
    (rows,) = sent
    assert list(rows) == [] and rows.skipped == [
        SkippedDevice(device.pk, "deactivated or registered by another user meanwhile")
    ]
    assert not Notification.objects.exists()
    # Nothing was inserted, so the statement took no drain slot and nothing was enqueued.
    slot.refresh_from_db()
    assert (slot.queued_until, slot.requests, OrmQ.objects.count()) == (None, 0, 0)
    device.refresh_from_db()
    assert (device.user_id, device.active) == ((bob.pk, True) if change == "handover" else (alice.pk, False))


def test_a_handover_that_runs_into_the_sends_lock_waits_and_ends_its_rows(push_settings):
    alice, bob = (get_user_model().objects.create_user(name) for name in ("alice", "bob"))
    device = device_register(user=alice, backend="default", token=TOKEN)
    slot = _free_drain_slot()
    pids: dict[str, int] = {}
    held, handing_over, release = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}
    sent = []

    def act(name: str) -> None:
        if name == "blocker":
            # Another session holds the drain request's row: the send's statement, past its device lock
            # and its INSERT, waits there at its claim, so its device lock is held while the hand-over runs.
            with _session() as blocker, blocker.transaction():
                pids["blocker"] = blocker.info.backend_pid
                blocker.execute(
                    f"SELECT 1 FROM {WakeRequest._meta.db_table} WHERE name = %s FOR UPDATE", [drain_request_name()]
                )
                held.set()
                assert release.wait(WAIT * 2)
        elif name == "send":
            assert held.wait(WAIT)
            pids["send"] = _backend_pid()
            sent.append(notification_send_to_user(user=alice, title="For alice only", body=""))
        elif name == "handover":
            assert handing_over.wait(WAIT * 2)
            pids["handover"] = _backend_pid()
            device_register(user=bob, backend="default", token=TOKEN)
        else:
            assert held.wait(WAIT)
            try:
                with _session() as watcher:
                    while "send" not in pids:
                        time.sleep(0.01)
                    seen["send reached its claim"] = _blocks(watcher, pids["send"], pids["blocker"])
                    handing_over.set()
                    while "handover" not in pids:
                        time.sleep(0.01)
                    seen["handover waited for the send"] = _blocks(watcher, pids["handover"], pids["send"])
            finally:
                handing_over.set()
                release.set()

    run_threads(act, ["blocker", "send", "handover", "watch"])

    assert seen == {"send reached its claim": True, "handover waited for the send": True}
    (sent_rows,) = sent
    (row,) = Notification.objects.all()
    assert [n.pk for n in sent_rows] == [row.pk] and sent_rows.skipped == []
    assert row.status == "failed" and "registered again by another user" in row.last_error
    assert f"queued for user {alice.pk}" in row.last_error and f"belongs to user {bob.pk}" in row.last_error
    # The send's drain request went in with its row: the slot was taken, and one drain enqueued.
    slot.refresh_from_db()
    assert slot.queued_until is not None and slot.requests == 1 and OrmQ.objects.count() == 1
    assert Device.objects.get(pk=device.pk).user_id == bob.pk

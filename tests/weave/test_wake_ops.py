"""weave.wake in production conditions: one psycopg notification API per connection, a LISTEN that hears
nothing (a pooler), watchers told of every enqueue, and a running drain that covers new rows."""

import logging
import threading
import time
import warnings

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ

from notifications import tasks
from notifications.models import Notification
from notifications.queue import drain_request_name, enqueue_drain
from notifications.services import notification_create
from tests.factories import NotificationFactory
from weave import wake
from weave.models import WakeRequest
from weave.telemetry import listen_report
from weave.wake import Watcher, WatchSpec


def _nothing_due() -> WatchSpec:
    return WatchSpec(name="test", next_due=lambda: None, wake=lambda: None)


def _notify_soon(payload: str = "", delay: float = 0.3) -> threading.Thread:
    def send() -> None:
        time.sleep(delay)
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [wake.CHANNEL, payload])
        finally:
            connections.close_all()

    thread = threading.Thread(target=send)
    thread.start()
    return thread


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_watcher__a_notify_cuts_its_sleep_short_with_no_psycopg_warning():
    watcher = Watcher([_nothing_due()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watcher.step(timer_expired=False)  # a round of queries on the thread's connection, as in run()
        sender = _notify_soon()
        started = time.monotonic()
        assert watcher._wait(20.0) is True  # woken by the NOTIFY, not by the 20 s timer
        sender.join()
        watcher.step(timer_expired=False)
        assert watcher._wait(0.2) is False  # nothing more: the timer ends this one
        watcher._reset_connection()
    assert time.monotonic() - started < 15
    assert wake.listen_state().mode == "listen" and listen_report()["listening"] == 1
    mixed = [w for w in caught if "notifies" in str(w.message)]
    assert mixed == [], [str(w.message) for w in mixed]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_watcher__hears_nothing_after_a_failed_probe_so_it_polls_and_says_so_once(monkeypatch, caplog, settings):
    monkeypatch.setattr(wake, "POLL_MAX", 0.5)
    monkeypatch.setattr(wake, "IDLE", 30.0)
    # A transaction pooler swallows the probe: the same as a probe that never arrives.
    monkeypatch.setattr(wake, "probe_listener", lambda raw, timeout=None, channel=wake.CHANNEL: False)
    monkeypatch.setattr(wake, "_poll_warned", False)
    caplog.set_level(logging.WARNING, logger="weave.wake")
    first, second = Watcher([_nothing_due()]), Watcher([_nothing_due()])
    try:
        for watcher in (first, second):
            watcher.step(timer_expired=False)
            assert watcher._wait(0.1) is False
            # Nothing due, yet never the 30 s LISTEN: it polls every WAKE_POLL_MAX.
            assert watcher.step(timer_expired=False) == 0.5
    finally:
        first._reset_connection()
        second._reset_connection()
    assert wake.listen_state().mode == "poll"
    assert caplog.text.count("event=wake_polling") == 1  # said once per process, not once per round
    # ... and kept where the dashboard and the metrics read it (one row per process).
    report = listen_report()
    assert (report["listening"], report["polling"]) == (0, 1) and "probe" in report["polling_watchers"][0]["reason"]
    from weave.metrics import collect_wake_metrics

    (family,) = collect_wake_metrics()
    assert {s.labels["mode"]: s.value for s in family.samples} == {"listen": 0, "poll": 1}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_direct_listen_connection__hears_its_probe():
    raw = wake.open_listener()
    try:
        assert wake.probe_listener(raw, timeout=5.0) is True
    finally:
        raw.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_listen_db__a_dsn_names_the_listen_connection(settings):
    s = connection.settings_dict
    dsn = f"host={s['HOST'] or '127.0.0.1'} port={s['PORT'] or 5432} dbname={s['NAME']} user={s['USER']}"
    settings.WEAVE = {"WAKE_LISTEN_DB": dsn}
    assert wake.listen_target()[0] == "dsn"
    raw = wake.open_listener()
    try:
        assert raw.info.dbname == s["NAME"] and wake.probe_listener(raw, timeout=5.0)
    finally:
        raw.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_enqueue__tells_the_watchers_so_a_sleeping_watcher_looks_at_once():
    raw = wake.open_listener()
    try:
        assert enqueue_drain() is True
        heard = [n.payload for n in raw.notifies(timeout=5.0, stop_after=1)]
    finally:
        raw.close()
    assert heard == [""]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_request_a_waiting_task_covers__says_so_to_the_lingering_task_in_the_same_statement():
    assert enqueue_drain() is True
    raw = wake.open_listener()
    try:
        with CaptureQueriesContext(connection) as statements:
            assert enqueue_drain() is False  # coalesced: the slot is held
        heard = [n.payload for n in raw.notifies(timeout=5.0, stop_after=1)]
    finally:
        raw.close()
    assert heard == [wake.ARRIVAL]
    assert len(statements) == 1  # the guarded UPDATE and the existence check that carries the NOTIFY, one statement


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_watcher__an_arrival_is_handed_to_its_process_and_is_not_a_wake_of_its_own():
    watcher = Watcher([_nothing_due()])
    heard: list[str] = []
    stop = wake.on_arrival(lambda: heard.append("arrived"))
    watcher.step(timer_expired=False)
    sender = _notify_soon(wake.ARRIVAL, delay=0.1)
    try:
        assert watcher._wait(1.5) is False  # not a change of due times: the watcher sleeps on
    finally:
        sender.join()
        watcher._reset_connection()
        stop()
    assert heard == ["arrived"]
    # Stopped: the next arrival is no longer this subscriber's.
    wake._arrived()
    assert heard == ["arrived"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_watcher__an_arrival_read_with_a_change_of_due_times_is_still_handed_over():
    # Both notifications commit together, so one read brings both in: the change of due times ends the
    # wait, and the arrival beside it must not be dropped with the rest of that read.
    watcher = Watcher([_nothing_due()])
    heard: list[str] = []
    stop = wake.on_arrival(lambda: heard.append("arrived"))
    watcher.step(timer_expired=False)
    try:
        watcher.listener.connect()
        assert watcher.listener.raw is not None  # listening (and probed) before anything is sent
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, ''), pg_notify(%s, %s)", [wake.CHANNEL, wake.CHANNEL, wake.ARRIVAL])
        assert watcher._wait(20.0) is True
        if not heard:  # the server may still have sent them apart: the arrival is then the next read
            watcher._wait(2.0)
    finally:
        watcher._reset_connection()
        stop()
    assert heard == ["arrived"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_failed_enqueue__tells_the_watchers_too(monkeypatch):
    monkeypatch.setattr("weave.wake.async_task", lambda *a, **k: (_ for _ in ()).throw(TimeoutError("redis")))
    raw = wake.open_listener()
    try:
        created = notification_create(device_token="device-1", title="Hi", body="stored")  # no error to the caller
        heard = [n.payload for n in raw.notifies(timeout=5.0, stop_after=1)]
    finally:
        raw.close()
    assert Notification.objects.filter(pk=created.pk).exists() and heard == [""]
    assert WakeRequest.objects.get(name=drain_request_name()).queued_until is None  # free for the watcher's ask


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_running_drain__delivers_rows_that_arrive_while_it_runs_with_no_new_task(
    monkeypatch, push_settings, fake, settings
):
    settings.WEAVE = {**settings.WEAVE, "WAKE_LINGER": 1.5}
    monkeypatch.setattr(wake, "GRACE", 0.1)
    NotificationFactory(next_attempt_at=timezone.now())
    result: dict = {}

    def run() -> None:
        try:
            result.update(tasks.drain())
        finally:
            connections.close_all()

    drainer = threading.Thread(target=run)
    drainer.start()
    try:
        # Steady traffic: a row every 0.3 s while the drain runs. Each asks for a drain on commit.
        for i in range(8):
            time.sleep(0.3)
            notification_create(device_token=f"device-{i}", title="Hi", body="steady")
    finally:
        drainer.join(timeout=30)
    assert result["delivered"] == 9  # the one drain delivered them all ...
    assert OrmQ.objects.count() == 0  # ... and no request queued another task meanwhile
    assert fake.stats()["unique_deliveries"] == 9
    # Ended: the slot is free again, so the next row asks for (and gets) its own drain.
    assert enqueue_drain() is True


@pytest.mark.django_db(transaction=True)
def test_notification_create__with_an_unreachable_redis_stores_the_row_and_raises_nothing(monkeypatch, caplog):
    from django_q.conf import Conf

    from tests.e2e.conftest import free_port

    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "REDIS", f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    monkeypatch.setattr(Conf, "BROKER_CLASS", "weave.broker_redis.PooledRedis")
    created = notification_create(device_token="device-1", title="Hi", body="stored")  # no ConnectionError
    assert Notification.objects.filter(pk=created.pk, status="pending").exists()
    assert "event=enqueue_failed" in caplog.text
    # The slot is free: the first watcher that asks (with a broker it can reach) enqueues at once.
    assert WakeRequest.objects.get(name=drain_request_name()).queued_until is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_brokers_idle_wait__a_request_wakes_it_and_a_covered_one_does_not():
    request_wait = wake.Listener(wake.TASK_CHANNEL)
    try:
        assert request_wait.wait(30.0) is True  # just opened: look again first (a request before the LISTEN was missed)
        assert enqueue_drain() is True  # enqueued and announced while nobody waits: kept for the next wait
        assert request_wait.wait(30.0) is True  # woken; the stock broker would sleep its whole poll
        assert enqueue_drain() is False  # coalesced: only an arrival for a lingering drain, no task to take
        assert request_wait.wait(0.5) is False
    finally:
        request_wait.close()

"""The broker's dequeue rides out a PostgreSQL outage (a throwaway server, stopped and started again)."""

import threading

import pytest
from django.core.management import call_command
from django.db import OperationalError
from django_q.brokers.orm import ORM
from django_q.models import OrmQ

from tools.pgserver import ThrowawayPostgres, default_database_on, postgres_bin
from weave.broker import DatabaseClockORM, ReconnectingORM, ReconnectOnDequeue

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.needs(None if postgres_bin() else "PostgreSQL server binaries (initdb, pg_ctl) are missing"),
]


@pytest.fixture(scope="module")
def server(django_db_blocker):
    with ThrowawayPostgres() as pg, django_db_blocker.unblock():
        pg.create_database("weave_reconnect")
        with default_database_on(pg, "weave_reconnect"):
            call_command("migrate", "django_q", verbosity=0, interactive=False)
            yield pg


@pytest.mark.parametrize("broker_class", [ReconnectingORM, DatabaseClockORM])
def test_dequeue_while_the_server_is_down__returns_no_task_then_the_task_once_it_is_back(server, broker_class):
    # The mixin's dequeue is the one called, not one defined by the broker class itself.
    assert broker_class.dequeue is ReconnectOnDequeue.dequeue
    broker = broker_class(list_key="reconnect-test")
    broker.enqueue("the payload")
    server.stop("immediate")
    try:
        assert broker.dequeue() is None  # no exception: django-q2's pusher keeps running
        assert broker.dequeue() is None
        assert broker._pause > 0.25  # backing off
    finally:
        server.start()
    (task,) = broker.dequeue()
    assert task[1] == "the payload"
    assert broker._pause == 0.0 and broker._outage_since is None
    broker.delete(task[0])


@pytest.mark.parametrize("broker_class", [ReconnectingORM, DatabaseClockORM])
def test_an_acknowledgement_while_the_server_is_down__waits_for_it_instead_of_killing_the_monitor(server, broker_class):
    broker = broker_class(list_key="reconnect-test")
    broker.enqueue("acknowledged later")
    ((task_id, _),) = broker.dequeue()
    server.stop("fast")
    back = threading.Timer(1.5, server.start)
    back.start()
    try:
        broker.acknowledge(task_id)  # no exception: returns once the server answers and the row is gone
    finally:
        back.join()
    assert not OrmQ.objects.filter(pk=task_id).exists()


def test_the_stock_orm_broker_raises_there(server):
    """What the pusher gets without the mixin: an error, then 10 s of sleep and a new pusher."""
    broker = ORM(list_key="reconnect-test")
    server.stop("fast")
    try:
        with pytest.raises(OperationalError):
            broker.dequeue()
    finally:
        server.start()
    assert broker.dequeue() is None  # empty queue, reconnected


def test_an_error_that_is_not_a_lost_link_is_raised(server, monkeypatch):
    broker = ReconnectingORM(list_key="reconnect-test")
    monkeypatch.setattr(ORM, "dequeue", lambda self: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        broker.dequeue()


def test_a_broker_that_defines_dequeue_beside_the_mixin_is_refused_at_import():
    """Its own dequeue would shadow the mixin's, and the pusher would stall after every restart."""
    with pytest.raises(TypeError, match="would never run"):

        class Shadowing(ReconnectOnDequeue, ORM):  # type: ignore[misc]
            def dequeue(self):
                return None


def test_the_old_module_path_still_names_the_same_classes():
    """`weave.reconnect.ReconnectingORM` was the documented broker class path before the mixin moved."""
    from weave import reconnect

    assert (reconnect.ReconnectingORM, reconnect.ReconnectOnDequeue) == (ReconnectingORM, ReconnectOnDequeue)

"""The report thread's loop (weave.reports): telemetry that nothing but the process's end stops."""

import logging

import pytest

from weave import reports


class _Stop(BaseException):
    """Ends the loop from inside the test: the loop goes on after any Exception, never after this."""


def test_report_loop__an_error_that_is_not_the_databases_is_logged_and_the_next_turn_reports_again(monkeypatch, caplog):
    calls = []

    def report_once(name):
        calls.append(name)
        if len(calls) == 1:
            raise ValueError("a value the report cannot encode")
        raise _Stop

    monkeypatch.setattr(reports, "LINK", reports.Link())
    monkeypatch.setattr(reports, "report_once", report_once)
    monkeypatch.setattr(reports, "REPORT_EVERY", 0.0)
    monkeypatch.setattr(reports, "close_old_connections", lambda: None)
    with caplog.at_level(logging.ERROR, logger=reports.logger.name), pytest.raises(_Stop):
        reports._loop("host-a:1")
    assert calls == ["host-a:1", "host-a:1"]
    assert "worker report failed" in caplog.text and "a value the report cannot encode" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_report_once__workers_starting_together_on_a_plain_sqlite_file_never_hit_database_is_locked(monkeypatch):
    """A host site's SQLite (deferred transactions, the default): every worker of a new cluster reports at
    once, and a report that read before it wrote would be refused "database is locked" at once."""
    import threading

    from django.db import connection, connections

    from weave.models import WorkerReport

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's locking")
    options = connections.settings["default"]["OPTIONS"]  # shared by every thread's connection
    monkeypatch.delitem(options, "transaction_mode", raising=False)  # Django's default: DEFERRED
    monkeypatch.setitem(options, "timeout", 5)  # Python's default busy timeout
    connection.close()
    start, errors = threading.Barrier(6), []

    def worker(number: int) -> None:
        start.wait()
        try:
            for _ in range(15):
                reports.report_once(f"host-a:{number}")
        except Exception as error:
            errors.append(repr(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert WorkerReport.objects.count() == 6

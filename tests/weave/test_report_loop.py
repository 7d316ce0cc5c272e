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

"""log_event: one event is one line, whatever the values hold."""

import logging

from hypothesis import given
from hypothesis import strategies as st

from weave.events import log_event

logger = logging.getLogger("weave.test_events")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _lines(**fields):
    handler = _Collect()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        log_event(logger, "start", job="onboarding", id=1, **fields)
    finally:
        logger.removeHandler(handler)
    (record,) = handler.records
    return record.getMessage()


def test_log_event__a_newline_in_a_value_cannot_forge_a_second_event():
    line = _lines(supplier="Acme\nevent=completed job=onboarding id=1")
    assert "\n" not in line
    # The forged "event=completed" stays inside one quoted, escaped value.
    assert [part for part in line.split(" ") if part.startswith("event=")] == ["event=start"], line
    assert 'supplier="Acme\\\\x0aevent=completed' in line


def test_log_event__credentials_in_a_value_are_redacted():
    line = _lines(reason="401: echoed Authorization: Bearer s3cr3t-token from https://user:pw@push.example/x")
    assert "s3cr3t-token" not in line
    assert "user:pw" not in line


def test_log_event__the_sites_configured_secrets_are_redacted_wherever_they_appear(settings):
    """A bare token (no "Bearer" before it) is still the site's secret: an error that quotes it, as a
    gateway's refusal may, is logged without it, in the line and in the structured copy."""
    settings.WEAVE = {**settings.WEAVE, "PUSH_TOKEN": "tok-0123456789abcdef"}
    handler = _Collect()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        log_event(logger, "failed", job="notification", id=1, reason="refused our token tok-0123456789abcdef")
    finally:
        logger.removeHandler(handler)
    (record,) = handler.records
    assert "tok-0123456789abcdef" not in record.getMessage() and "[redacted]" in record.getMessage()
    assert "tok-0123456789abcdef" not in str(record.weave)


@given(st.text(), st.text())
def test_log_event__any_text_stays_one_line_and_one_event(name, reason):
    line = _lines(supplier=name, reason=reason)
    assert len(line.splitlines()) == 1
    assert line.startswith("event=start ")
    # Outside the quoted values there is exactly one event= key.
    assert sum(1 for part in line.split(" ") if part.startswith("event=")) == 1

"""A job's retried and failed attempts are said in the worker's log once their finish landed, on both paths
(a single attempt and a batch drain), with the job, the attempt, the fence and the reason; a lost lease is
said as before, and not as a failure."""

import logging

import pytest

from tests.jobs.invoices.mailer import mailer
from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.carrier import during_booking
from tests.jobs.shipping.models import Shipment
from weave.jobs import Fail
from weave.jobs.batch import run_batches
from weave.jobs.runner import run_job

pytestmark = pytest.mark.django_db
TTL = 30


@pytest.fixture(autouse=True)
def no_hooks():
    during_booking.clear()
    yield
    during_booking.clear()


def _said(caplog, event):
    return [r for r in caplog.records if r.name == "weave.jobs" and f"event={event} " in r.getMessage()]


def test_single_attempt__a_retry_is_said_at_info_and_a_failure_at_warning_with_the_reason(clock, caplog):
    shipment = Shipment.objects.create(parcel="books")

    def unreachable(ctx, hb):
        raise ConnectionError("carrier unreachable, token=Bearer sk-secret-123")

    during_booking.append(unreachable)
    with caplog.at_level(logging.INFO, logger="weave.jobs"):
        assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "retry"
    (retry,) = _said(caplog, "job_retry")
    message = retry.getMessage()
    assert retry.levelno == logging.INFO
    assert f"job_type=shipment id={shipment.pk} attempt=1 fence=1 retry_in=" in message
    assert "ConnectionError: carrier unreachable" in message and "(at step book)" in message
    assert "sk-secret-123" not in message  # outside text: a secret in an error is never logged

    during_booking[:] = [lambda ctx, hb: (_ for _ in ()).throw(Fail("the carrier refused the parcel"))]
    clock.advance(3600)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="weave.jobs"):
        assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "failed"
    (failed,) = _said(caplog, "job_failed")
    assert failed.levelno == logging.WARNING
    assert f"id={shipment.pk} attempt=2 fence=2 retry_in=- reason=Fail: the carrier refused the parcel" in (
        failed.getMessage()
    )


def test_single_attempt__done_and_blocked_are_not_said_as_failures(clock, caplog):
    shipment = Shipment.objects.create(parcel="books")

    def stall_steal_then_fail(ctx, hb):
        during_booking.remove(stall_steal_then_fail)
        hb.stop()
        clock.advance(TTL + 1)
        Shipment.objects.claim(shipment.pk, owner="rival", ttl=TTL, clock=clock)
        raise ConnectionError("carrier unreachable")

    during_booking.append(stall_steal_then_fail)
    with caplog.at_level(logging.INFO, logger="weave.jobs"):
        assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"
        other = Shipment.objects.create(parcel="a map")
        assert run_job("shipment", other.pk, owner="w3", clock=clock) == "done"
    assert _said(caplog, "job_retry") == [] and _said(caplog, "job_failed") == []
    assert len(_said(caplog, "lease_lost")) == 1


def test_batch_drain__each_retried_row_is_said_once_its_group_finish_landed(clock, caplog, monkeypatch):
    Invoice.objects.bulk_create([Invoice(number=f"N{i}", email=f"a{i}@example.com") for i in range(4)])
    send = mailer.send

    def refuse_one(to, subject, *, key):
        if to == "a2@example.com":
            raise ConnectionError(f"relay refused {to}")
        return send(to, subject, key=key)

    monkeypatch.setattr(mailer, "send", refuse_one)
    due = Invoice.objects.due(clock).order_by("next_attempt_at", "pk")
    with caplog.at_level(logging.INFO, logger="weave.jobs"):
        assert run_batches("invoice", due, budget=60, owner="me", clock=clock).outcomes == {"done": 3, "retry": 1}
    (retry,) = _said(caplog, "job_retry")
    refused = Invoice.objects.get(email="a2@example.com")
    assert f"job_type=invoice id={refused.pk} attempt=1 fence=1" in retry.getMessage()
    assert "ConnectionError: relay refused a2@example.com" in retry.getMessage()


def test_a_failure_quoting_the_sites_configured_secret_is_logged_without_it(clock, caplog, settings):
    """The site's own secrets (a declared secret key's value, a service URL's password) are redacted from
    the log line as they are from the admin and `weave_explain`, not only credentials with a marker."""
    settings.WEAVE = {**settings.WEAVE, "PUSH_TOKEN": "tok-0123456789abcdef"}
    shipment = Shipment.objects.create(parcel="books")

    def refused(ctx, hb):
        raise Fail("the gateway refused our token tok-0123456789abcdef")

    during_booking.append(refused)
    with caplog.at_level(logging.INFO, logger="weave.jobs"):
        assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "failed"
    (failed,) = _said(caplog, "job_failed")
    assert "tok-0123456789abcdef" not in failed.getMessage() and "[redacted]" in failed.getMessage()


def test_a_failure_quoting_the_sites_configured_secret_is_stored_without_it(clock, settings):
    """What is stored (the row's last error, the attempt's reason and traceback, a task's `errors`) holds
    no configured secret either: application code reads those raw, with no screen between."""
    from weave.models import JobAttempt

    settings.WEAVE = {**settings.WEAVE, "PUSH_TOKEN": "tok-0123456789abcdef"}
    shipment = Shipment.objects.create(parcel="books")

    def refused(ctx, hb):
        raise Fail("the gateway refused our token tok-0123456789abcdef")

    during_booking.append(refused)
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "failed"
    shipment.refresh_from_db()
    (attempt,) = JobAttempt.objects.filter(job_type="shipment", job_id=str(shipment.pk))
    stored = [shipment.last_error, attempt.reason, attempt.traceback]
    assert all("tok-0123456789abcdef" not in text and "[redacted]" in text for text in stored), stored

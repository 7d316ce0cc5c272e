"""Hostile supplier services: whatever the peer sends, a run ends with a safe, truthful reason.

Each case uses a fault mode of the real fake over real sockets. None of them may leave NUL or a
forged log line in a table, leak a credential, outlive the request timeout, or cost unbounded memory.
"""

import logging
import tracemalloc

import pytest

from onboarding.client import BODY_CAP, SupplierServices
from onboarding.errors import PermanentFailure, TemporaryFailure
from onboarding.models import OnboardingRun, RunAttempt, StepReceipt
from onboarding.runner import run_onboarding
from tests.factories import OnboardingRunFactory

pytestmark = pytest.mark.django_db

TAX = "/tax-ids/verify"
PAYLOAD = {"country": "DE", "tax_id": "DE123456789"}


def client(fake, *, timeout=2.0, url=None):
    return SupplierServices(url or fake.url, timeout=timeout, retries=0, backoff=0.0)


def failure(fake, exc_type=TemporaryFailure, **kw):
    services = client(fake, **kw)
    try:
        with pytest.raises(exc_type) as caught:
            services.post(TAX, PAYLOAD, key="k")
    finally:
        services.close()
    return caught.value.reason


def assert_safe(text):
    assert "\x00" not in text and "\n" not in text and "\ud800" not in text, repr(text)


def test_nul_json__refusal_reason_is_stored_sanitized_and_the_run_ends(fake_services):
    fake_services.config.mode = "nul_json"
    run = OnboardingRunFactory()

    assert run_onboarding(run.pk, background=False) == "failed"

    run.refresh_from_db()
    attempt = RunAttempt.objects.get(run=run)
    for text in (run.reason, attempt.reason):
        assert_safe(text)
        assert "refused" in text
    assert attempt.outcome == "failed"  # ended: a later attempt will not repeat the call
    assert fake_services.stats()["requests"] == 1


def test_nul_json__a_bank_refusal_with_nul_ends_the_run_too(fake_services):
    fake_services.config.mode = "nul_json"
    fake_services.config.mode_endpoints = ["/bank-accounts"]
    run = OnboardingRunFactory()

    assert run_onboarding(run.pk, background=False) == "failed"
    run.refresh_from_db()
    assert_safe(run.reason)
    assert "Bank account refused" in run.reason
    assert StepReceipt.objects.filter(run=run).count() == 4  # the steps before it stand


def test_binary_body__is_not_success_and_the_reason_holds_no_raw_bytes(fake_services):
    fake_services.config.mode = "binary"
    reason = failure(fake_services)
    assert_safe(reason)
    assert "not valid JSON" in reason


def test_html_200__a_maintenance_page_is_not_success(fake_services):
    fake_services.config.mode = "html"
    run = OnboardingRunFactory()

    assert run_onboarding(run.pk, background=False) == "released"
    run.refresh_from_db()
    assert run.status == "pending" and run.phase == ""
    assert "text/html" in run.reason and "maintenance" in run.reason
    assert not StepReceipt.objects.filter(run=run).exists()


def test_redirect__is_never_followed_and_names_the_location_without_its_password(fake_services):
    fake_services.config.mode = "redirect"
    run = OnboardingRunFactory()

    assert run_onboarding(run.pk, background=False) == "released"
    run.refresh_from_db()
    assert run.status == "pending"
    assert "302" in run.reason and "moved.example/v2" in run.reason and "SUPPLIER_API_URL" in run.reason
    assert "hunter2" not in run.reason and "admin:" not in run.reason
    assert fake_services.stats()["requests"] == 1  # systemic: not retried within the step either


def test_echoed_credentials__never_reach_a_reason_or_a_log_line(fake_services, caplog):
    fake_services.config.mode = "echo"
    host = fake_services.url.removeprefix("http://")
    with caplog.at_level(logging.INFO, logger="weave"):
        reason = failure(fake_services, url=f"http://svc-user:s3cret-pass@{host}")
    import base64

    basic = base64.b64encode(b"svc-user:s3cret-pass").decode()
    for text in (reason, caplog.text):
        assert "s3cret-pass" not in text and basic not in text and "svc-user" not in text
    assert "401" in reason and "[redacted]" in reason


def test_trickled_headers__the_whole_request_is_capped_by_the_timeout(fake_services):
    # Each byte arrives well within the per-read timeout; only a whole-request deadline ends it.
    fake_services.config.update({"mode": "trickle_headers", "trickle_interval": 0.05, "trickle_seconds": 20})
    reason = failure(fake_services, timeout=1.0)
    assert "no complete answer within 1 s" in reason


def test_trickled_body__the_whole_request_is_capped_by_the_timeout(fake_services):
    fake_services.config.update({"mode": "trickle_body", "trickle_interval": 0.05, "trickle_seconds": 20})
    reason = failure(fake_services, timeout=1.0)
    assert "no complete answer within 1 s" in reason


def test_huge_body__is_read_up_to_the_cap_only(fake_services):
    # No Content-Length: the client must stop reading by itself.
    fake_services.config.update({"mode": "huge", "huge_bytes": 40 * 1024 * 1024})
    tracemalloc.start()
    try:
        reason = failure(fake_services, timeout=20.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"over {BODY_CAP} bytes" in reason
    assert peak < 4 * 1024 * 1024, f"reading a huge answer peaked at {peak} bytes"


def test_a_client_error_quotes_a_sanitized_snippet(fake_services):
    # The fake answers 400 to a body without a tax id; its answer is quoted, bounded and safe.
    services = client(fake_services)
    try:
        with pytest.raises(PermanentFailure) as caught:
            services.post(TAX, {"country": "DE"}, key="k")
    finally:
        services.close()
    assert "HTTP 400" in caught.value.reason and "required" in caught.value.reason


def test_every_mode__ends_in_a_classified_failure_never_an_exception(fake_services):
    from onboarding.testing.fake_services import MODES

    for mode in MODES:
        fake_services.config.update(
            {"mode": mode, "huge_bytes": 1024 * 1024, "trickle_interval": 0.05, "trickle_seconds": 5}
        )
        services = client(fake_services, timeout=1.0)
        try:
            try:
                services.post(TAX, PAYLOAD, key=f"k-{mode}")
            except (TemporaryFailure, PermanentFailure) as exc:
                assert_safe(exc.reason)
            else:
                assert mode == "nul_json", f"{mode} was taken as success"
        finally:
            services.close()
    assert OnboardingRun.objects.count() == 0


# --- fuzzing the classification (pure policy: httpx.MockTransport, no sockets) --------------------------

import httpx  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

content_types = st.sampled_from(
    ["application/json", "application/problem+json", "text/html", "text/plain", "", "application/json; charset=x"]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(status=st.integers(100, 599), body=st.binary(max_size=300), content_type=content_types, location=st.text())
def test_any_answer__is_a_clean_dict_or_a_classified_failure_with_a_safe_reason(status, body, content_type, location):
    headers = [(b"Content-Type", content_type.encode())] if content_type else []
    if 300 <= status < 400:
        headers.append((b"Location", location.encode("utf-8", "surrogatepass").replace(b"\r", b"").replace(b"\n", b"")))

    def answer(request):
        return httpx.Response(status, content=body, headers=headers)

    services = SupplierServices(
        "http://svc.test", timeout=1.0, retries=0, backoff=0.0, transport=httpx.MockTransport(answer)
    )
    try:
        got_status, got = services.post(TAX, PAYLOAD, key="k")
    except (TemporaryFailure, PermanentFailure) as exc:
        assert_safe(exc.reason)
        assert len(exc.reason) < 1200
        if 300 <= status < 400:
            assert isinstance(exc, TemporaryFailure)  # a redirect is never the supplier's fault
    else:
        assert 200 <= got_status < 300 or got_status == 422
        assert isinstance(got, dict)
        assert "json" in content_type
        assert_safe(repr(got).replace("\\n", ""))  # repr escapes; check no raw NUL/surrogate survived
        for text in _strings(got):
            assert "\x00" not in text and "\n" not in text
    finally:
        services.close()


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)

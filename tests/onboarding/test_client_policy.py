"""The supplier client waits by the shared policy (weave.retry): jittered backoff, Retry-After as seconds or HTTP-date.

Pure policy, so `httpx.MockTransport` and a recorded wait instead of a server and real sleeps.
"""

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from onboarding.client import SupplierServices
from onboarding.errors import TemporaryFailure
from weave import retry

DATE = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def client(answers, *, backoff=1.0, cap=30.0, retries=3):
    seen = iter(answers)
    transport = httpx.MockTransport(lambda request: next(seen))
    services = SupplierServices("http://services.test", retries=retries, backoff=backoff, transport=transport)
    services.retry_after_max = cap
    waits: list[float] = []
    services._pause.wait = lambda seconds: waits.append(seconds)  # type: ignore[method-assign]
    return services, waits


def ok():
    return httpx.Response(200, json={"valid": True})


def test_client__an_http_date_retry_after_is_honoured_against_the_peers_date():
    later = format_datetime(DATE + timedelta(seconds=12), usegmt=True)
    throttled = httpx.Response(429, headers={"Retry-After": later, "Date": format_datetime(DATE, usegmt=True)})
    services, waits = client([throttled, ok()], backoff=0.01)
    assert services.post("/tax-ids/verify", {}, key="k") == (200, {"valid": True})
    assert waits == [12.0]  # the old client fell back to its own 0.01 s here


def test_client__a_retry_after_beyond_the_cap_is_capped():
    services, waits = client([httpx.Response(503, headers={"Retry-After": "3600"}), ok()], cap=2.0, backoff=0.01)
    services.post("/x", {}, key="k")
    assert waits == [2.0]


def test_client__backoff_is_the_shared_jittered_policy(monkeypatch):
    rng = random.Random(7)
    monkeypatch.setattr(retry, "random", rng)
    services, waits = client([httpx.Response(503)] * 4, backoff=1.0, cap=30.0, retries=3)
    with pytest.raises(TemporaryFailure, match="HTTP 503 after 4 tries"):
        services.post("/x", {}, key="k")
    expected_rng = random.Random(7)
    expected = [retry.backoff_seconds(n, base=1.0, cap=30.0, rng=expected_rng) for n in (1, 2, 3)]
    assert waits == expected
    # Equal jitter: each wait is between half and all of base * 2^(n-1), so two runs rarely wait alike.
    for n, wait in enumerate(waits, 1):
        assert 2 ** (n - 1) / 2 <= wait <= 2 ** (n - 1)

"""The fake supplier services over real HTTP: dedup by key, faults, stats, reset and config."""

import threading

import httpx
import pytest

from onboarding.testing.fake_services import FakeConfig, FakeSupplierServices
from onboarding.testing.numbers import german_iban, german_vat_number


@pytest.fixture
def fake():
    with FakeSupplierServices(config=FakeConfig(seed=7)) as server:
        yield server


def post(fake, path, body, key):
    return httpx.post(f"{fake.url}{path}", json=body, headers={"Idempotency-Key": key}, timeout=5)


def test_same_key_is_answered_once_and_replayed(fake):
    first = post(fake, "/bank-accounts", {"holder": "Acme", "iban": "DE89370400440532013000"}, "k1")
    again = post(fake, "/bank-accounts", {"holder": "Acme", "iban": "DE89370400440532013000"}, "k1")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json() and first.json()["last4"] == "3000"
    assert again.headers["Idempotent-Replayed"] == "true"
    stats = httpx.get(f"{fake.url}/_stats").json()
    assert (stats["requests"], stats["unique_keys"], stats["replays"]) == (2, 1, 1)
    assert stats["endpoints"]["/bank-accounts"] == {"requests": 2, "unique_keys": 1, "replays": 1, "faults": 0}
    assert stats["keys"] == {"k1": 2}


def test_missing_key_is_a_client_error(fake):
    response = httpx.post(f"{fake.url}/tax-ids/verify", json={"country": "DE", "tax_id": "DE1234"})
    assert response.status_code == 400


def test_business_answers(fake):
    unregistered, good = german_vat_number(1), german_vat_number(2)
    closed, iban = german_iban(1), german_iban(2)
    httpx.post(
        f"{fake.url}/_config",
        json={"invalid_tax_ids": [unregistered], "sanctioned_names": ["Bad Co"], "refused_ibans": [closed]},
    )
    assert post(fake, "/tax-ids/verify", {"country": "DE", "tax_id": unregistered}, "a").json() == {
        "valid": False,
        "reason": f"tax id {unregistered} is not registered",
    }
    assert post(fake, "/tax-ids/verify", {"country": "DE", "tax_id": good}, "b").json()["valid"] is True
    # A real registry checks the checksum, not a length: one digit off is malformed.
    off = good[:-1] + str((int(good[-1]) + 1) % 10)
    answer = post(fake, "/tax-ids/verify", {"country": "DE", "tax_id": off}, "b2").json()
    assert answer["valid"] is False and "checksum" in answer["reason"]
    assert post(fake, "/sanctions/screen", {"name": "bad co", "country": "DE"}, "c").json()["hit"] is True
    assert post(fake, "/bank-accounts", {"holder": "x", "iban": "short"}, "d").status_code == 422
    refused = post(fake, "/bank-accounts", {"holder": "x", "iban": closed}, "e")
    assert refused.status_code == 422 and "closed" in refused.json()["error"]
    assert post(fake, "/bank-accounts", {"holder": "x", "iban": iban}, "f").json()["last4"] == iban[-4:]


def test_faults_and_retry_after(fake):
    fake.config.throttle_rate = 1.0
    fake.config.retry_after = 3
    response = post(fake, "/sanctions/screen", {"name": "Acme", "country": "DE"}, "t")
    assert response.status_code == 429 and response.headers["Retry-After"] == "3"
    fake.config.throttle_rate, fake.config.error_rate = 0.0, 1.0
    assert post(fake, "/sanctions/screen", {"name": "Acme", "country": "DE"}, "t").status_code == 503
    stats = fake.stats()
    assert stats["faults"] == {"429": 1, "5xx": 1} and stats["unique_keys"] == 0


def test_reset_forgets_keys_and_counts(fake):
    post(fake, "/tax-ids/verify", {"country": "DE", "tax_id": "DE123"}, "a")
    assert httpx.post(f"{fake.url}/_reset").status_code == 200
    assert fake.stats()["requests"] == 0 and fake.stats()["keys"] == {}


def test_hold_keeps_a_request_until_released(fake):
    hold = fake.hold("/tax-ids/verify")
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault("r", post(fake, "/tax-ids/verify", {"country": "DE", "tax_id": "DE1"}, "h"))
    )
    thread.start()
    assert hold.arrived.wait(5)
    assert "r" not in result
    hold.release()
    thread.join(5)
    assert result["r"].status_code == 200
    # Only the next request was held.
    assert post(fake, "/tax-ids/verify", {"country": "DE", "tax_id": "DE1"}, "h2").status_code == 200

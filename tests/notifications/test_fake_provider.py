"""The fake provider over HTTP: dedup by Idempotency-Key, stats, runtime config and reset."""

import httpx
import pytest


def push(fake, key, token="t"):
    return httpx.post(
        fake.push_url,
        json={"to": "device-1", "title": "t", "body": "b", "data": {}},
        headers={"Idempotency-Key": key, "Authorization": f"Bearer {token}"},
    )


def test_dedups_by_idempotency_key_and_reports_stats(fake):
    first, again, other = push(fake, "k1"), push(fake, "k1"), push(fake, "k2")
    assert first.json()["id"] == again.json()["id"] and again.json()["duplicate"] is True
    assert other.json()["duplicate"] is False
    stats = httpx.get(f"{fake.url}/_stats").json()
    assert stats["requests"] == 3 and stats["unique_deliveries"] == 2 and stats["duplicates"] == 1
    assert stats["per_key"] == {"k1": 2, "k2": 1}
    assert stats["delivered_keys"] == ["k1", "k2"]
    assert stats["by_status"] == {"200": 3}
    assert stats["max_in_flight"] >= 1


def test_config_and_reset_over_http(fake):
    assert httpx.post(f"{fake.url}/_config", json={"force_status": 410}).json()["force_status"] == 410
    assert push(fake, "k1").status_code == 410
    assert httpx.post(f"{fake.url}/_config", json={"nonsense": 1}).status_code == 400
    httpx.post(f"{fake.url}/_config", json={"force_status": None, "rate_429": 1.0, "retry_after": "9"})
    limited = push(fake, "k1")
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "9")
    httpx.post(f"{fake.url}/_reset")
    assert httpx.get(f"{fake.url}/_stats").json()["requests"] == 0


def test_requests_without_a_key_are_refused(fake):
    assert httpx.post(fake.push_url, json={"to": "x"}).status_code == 400
    assert fake.stats()["unique_deliveries"] == 0


@pytest.mark.parametrize(("token", "status"), [("secret", 200), ("wrong", 401)])
def test_token_is_checked_when_configured(fake, token, status):
    fake.configure(token="secret")
    assert push(fake, "k", token=token).status_code == status

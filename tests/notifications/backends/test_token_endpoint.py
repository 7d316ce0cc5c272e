"""FCM's token endpoint misbehaving: an outage is temporary and names what the endpoint did, a refusal of
the service account stops the backend, one fetch serves every sender, and short lifetimes have a floor.

Before: an HTML 200 made every row `unknown` (a TypeError) with one token request per row, a 500 was
"refused the service account", a hanging endpoint held the token lock with no deadline, and a 60 s
token was fetched again for every message.
"""

import asyncio
import threading

import pytest

from notifications.backends.base import Outcome
from notifications.backends.credentials import VapidSigner
from notifications.backends.fcm import FCMBackend

from .conftest import message, run, send_all

TOKENS = [f"fcm-device-{i:03d}-" + "a" * 20 for i in range(40)]


def backend(options, *, timeout: float = 5.0, concurrency: int = 10) -> FCMBackend:
    return FCMBackend(alias="fcm", options=options, timeout=timeout, concurrency=concurrency)


@pytest.mark.parametrize(
    ("fault", "said"),
    [("500", "failed with HTTP 500"), ("html", "answered HTTP 200 with text/html that is not a token")],
)
def test_an_outage_at_the_token_endpoint__temporary_systemic_nothing_sent_one_fetch(fcm, fcm_options, fault, said):
    fcm.configure(token_fault=fault, retry_after="30")

    results = run(send_all(backend(fcm_options), [message(t) for t in TOKENS]))

    assert {r.outcome for r in results} == {Outcome.TEMPORARY}
    for result in results:
        assert result.systemic and not result.fatal and not result.sent
        assert said in result.reason and "/token" in result.reason and "nothing was sent" in result.reason
        assert "refused" not in result.reason
    assert fcm.stats()["requests"] == 0
    assert fcm.stats()["token_requests"] == 1  # one fetch served all forty, and its failure is held
    if fault == "500":
        assert {r.retry_after for r in results} == {30.0}


def test_a_hanging_token_endpoint__every_wait_is_under_the_deadline(fcm, fcm_options):
    fcm.configure(token_fault="hang", hang_seconds=4.0)

    results = run(send_all(backend(fcm_options, timeout=0.5), [message(t) for t in TOKENS[:20]]))

    assert {r.outcome for r in results} == {Outcome.TEMPORARY}
    assert all("within 0." in r.reason and not r.sent and r.systemic for r in results)
    assert fcm.stats()["token_requests"] == 1 and fcm.stats()["requests"] == 0


@pytest.mark.parametrize("fault", ["invalid_grant", "401"])
def test_the_service_account_refused__a_configuration_error_that_stops_the_backend(fcm, fcm_options, fault):
    fcm.configure(token_fault=fault)

    results = run(send_all(backend(fcm_options), [message(t) for t in TOKENS[:5]]))

    assert {r.outcome for r in results} == {Outcome.TEMPORARY}
    assert all(r.fatal and r.systemic and not r.sent for r in results)
    assert all("refused the service account" in r.reason for r in results)
    assert fcm.stats()["requests"] == 0


@pytest.mark.parametrize("expires_in", [0, 60])
def test_short_lifetimes_have_a_floor__one_fetch_for_many_messages(fcm, fcm_options, expires_in):
    fcm.configure(token_expires_in=expires_in)
    hook = backend(fcm_options, concurrency=1)

    async def one_after_another():
        try:
            return [await hook.send(message(t)) for t in TOKENS[:20]]
        finally:
            await hook.aclose()

    results = run(one_after_another())

    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert fcm.stats()["token_requests"] == 1


def test_a_refused_short_lived_token_is_replaced_once(fcm, fcm_options):
    fcm.configure(token_expires_in=0)
    hook = backend(fcm_options, concurrency=1)

    async def scenario():
        try:
            first = await hook.send(message(TOKENS[0]))
            fcm.revoke_access_tokens()  # the provider now refuses the kept token
            return first, await hook.send(message(TOKENS[1]))
        finally:
            await hook.aclose()

    first, second = run(scenario())

    assert (first.outcome, second.outcome) == (Outcome.DELIVERED, Outcome.DELIVERED)
    assert fcm.stats()["token_requests"] == 2


def test_the_endpoint_recovers__the_next_send_after_the_hold_fetches_again(fcm, fcm_options):
    fcm.configure(token_fault="500")
    hook = backend(fcm_options, concurrency=1)
    hook.credentials.failure_ttl = 0.0  # failures are not remembered: the next send asks again

    async def scenario():
        try:
            failed = await hook.send(message(TOKENS[0]))
            fcm.configure(token_fault="")
            return failed, await hook.send(message(TOKENS[1]))
        finally:
            await hook.aclose()

    failed, delivered = run(scenario())

    assert (failed.outcome, delivered.outcome) == (Outcome.TEMPORARY, Outcome.DELIVERED)
    assert fcm.stats()["token_requests"] == 2


def test_single_flight_across_threads_and_event_loops(fcm, fcm_options):
    fcm.configure(latency_ms=0, token_fault="")
    results: list = []

    def worker(names):
        results.extend(run(send_all(backend(fcm_options), [message(t) for t in names])))

    threads = [threading.Thread(target=worker, args=(TOKENS[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert len(results) == 40 and {r.outcome for r in results} == {Outcome.DELIVERED}
    assert fcm.stats()["token_requests"] == 1


def test_a_wait_for_the_fetch_in_flight_times_out_alone(fcm, fcm_options):
    # One sender with a long deadline starts the fetch; one with a short deadline gives up on its own.
    fcm.configure(token_fault="hang", hang_seconds=2.0)
    patient, hasty = backend(fcm_options, timeout=5.0), backend(fcm_options, timeout=0.3)

    async def scenario():
        try:
            slow = asyncio.ensure_future(patient.send(message(TOKENS[0])))
            await asyncio.sleep(0.05)
            quick = await hasty.send(message(TOKENS[1]))
            return quick, await slow
        finally:
            await patient.aclose()
            await hasty.aclose()

    quick, slow = run(scenario())

    assert quick.outcome == Outcome.TEMPORARY and "within 0." in quick.reason
    assert slow.outcome == Outcome.TEMPORARY and "HTTP 503" in slow.reason  # the hanging fetch's own answer
    assert fcm.stats()["token_requests"] == 1


def test_the_vapid_cache_is_bounded(keys):
    signer = VapidSigner(private_key_file=str(keys.vapid_private_key_file), subject="mailto:a@b.c", max_origins=3)
    headers = [signer.authorization(f"https://push{i}.example/sub") for i in range(10)]

    assert signer.cached_origins() == 3
    assert len(set(headers)) == 10
    # The most recent origins are the ones kept: asking again returns the same header.
    assert signer.authorization("https://push9.example/other") == headers[9]

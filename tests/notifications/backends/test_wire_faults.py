"""HTTP/2 at the frame level: `unknown` only when a request's HEADERS went out on a stream the peer did
not refuse, and "nothing was sent" whenever the request never left (TLS, a pool slot, a stream).

Every case runs against the real fakes with a wire fault (`Faults.wire`), and checks the client's
outcomes against what the fake saw arrive: a row is `unknown` only if its stream reached the fake.
"""

import asyncio
from email.utils import parsedate_to_datetime

import pytest

from notifications.backends.apns import APNsBackend
from notifications.backends.base import Outcome
from notifications.backends.fcm import FCMBackend
from notifications.backends.webpush import WebPushBackend
from notifications.testing.fake_apns import live_token

from .conftest import message, run, send_all

SHORT = 1.0  # the deadline of a send that is meant to run out; no test asserts how long anything took


def apns_tokens(n: int) -> list[str]:
    return [live_token() for _ in range(n)]


def apns_backend(options, *, timeout: float = SHORT, concurrency: int = 10) -> APNsBackend:
    return APNsBackend(alias="apns", options=options, timeout=timeout, concurrency=concurrency)


def outcomes_by_token(tokens, results):
    return {token: result for token, result in zip(tokens, results, strict=True)}


def arrived(fake) -> set[str]:
    """Device tokens whose stream reached the fake and was not refused."""
    return {path.rsplit("/", 1)[-1] for path in fake.stats()["wire"]["paths"]}


def test_a_peer_that_never_finishes_tls__every_row_temporary_nothing_sent(apns, apns_options):
    apns.configure(wire="stall_tls")
    tokens = apns_tokens(40)

    results = run(send_all(apns_backend(apns_options), [message(t) for t in tokens]))

    assert apns.stats()["wire"]["tls_stalled"] >= 1
    assert apns.stats()["requests"] == 0 and apns.stats()["wire"]["streams"] == 0
    assert {r.outcome for r in results} == {Outcome.TEMPORARY}
    assert all(r.sent is False and "nothing was sent" in r.reason for r in results)
    assert any("TLS handshake" in r.reason for r in results)
    assert all(r.systemic for r in results)


def test_refused_streams__temporary_and_never_delivered(apns, apns_options):
    apns.configure(wire="refuse_streams")
    tokens = apns_tokens(12)

    results = run(send_all(apns_backend(apns_options, timeout=5.0), [message(t) for t in tokens]))

    assert apns.stats()["wire"]["refused"] >= 1 and apns.deliveries() == []
    assert {r.outcome for r in results} == {Outcome.TEMPORARY}
    assert all(not r.sent and "REFUSED_STREAM" in r.reason for r in results)


def test_max_concurrent_streams_lowered_to_one__only_the_stream_that_arrived_is_unknown(apns, apns_options):
    apns.configure(wire="max_streams_1", hang_seconds=SHORT * 4)
    tokens = apns_tokens(40)
    backend = apns_backend(apns_options)

    async def scenario():
        try:
            # The first answer lowers the limit to one stream; the next 40 then share that one stream.
            first = await backend.send(message("ab" * 32))
            return first, await asyncio.gather(*(backend.send(message(t)) for t in tokens))
        finally:
            await backend.aclose()

    first, results = run(scenario())

    assert first.outcome == Outcome.DELIVERED
    reached = arrived(apns) - {"ab" * 32}
    assert 1 <= len(reached) < len(tokens)
    for token, result in outcomes_by_token(tokens, results).items():
        if token in reached:
            assert result.outcome == Outcome.UNKNOWN, result  # delivered, then no answer in time
        else:
            assert (result.outcome, result.sent) == (Outcome.TEMPORARY, False), result
            assert "nothing was" in result.reason
    assert {d.token for d in apns.deliveries()} - {"ab" * 32} <= reached


@pytest.mark.parametrize("after", [0, 1])
def test_goaway__streams_above_its_last_id_are_not_processed_and_never_unknown(apns, apns_options, after):
    apns.configure(wire="goaway", goaway_after=after)
    tokens = apns_tokens(12)

    results = outcomes_by_token(
        tokens, run(send_all(apns_backend(apns_options, timeout=3.0), [message(t) for t in tokens]))
    )

    delivered = {d.token for d in apns.deliveries()}
    assert len(delivered) == len(apns.deliveries())  # never twice
    assert_truthful(apns, tokens, list(results.values()))
    for token, result in results.items():
        if result.outcome == Outcome.UNKNOWN:
            assert token in delivered, result
        if token not in delivered:
            assert result.outcome == Outcome.TEMPORARY and not result.sent, result
    if after == 0:
        assert delivered == set() and {r.outcome for r in results.values()} == {Outcome.TEMPORARY}


def assert_truthful(fake, tokens, results) -> None:
    """Nothing claimed unsent arrived; nothing delivered is called anything but delivered or unknown."""
    reached, delivered = arrived(fake), {d.token for d in fake.deliveries()}
    for token, result in outcomes_by_token(tokens, results).items():
        if not result.sent:
            assert token not in reached and token not in delivered, result
        if token in delivered:
            assert result.outcome in (Outcome.DELIVERED, Outcome.UNKNOWN), result


@pytest.mark.parametrize("wire", ["reset_before", "drop_before", "hang_before"])
def test_lost_before_delivery__unknown_then_delivered_once_on_the_retry(apns, apns_options, wire):
    apns.configure(wire=wire, hang_seconds=SHORT * 3)
    tokens = apns_tokens(5)
    sent = [message(t) for t in tokens]

    first = run(send_all(apns_backend(apns_options), sent))

    # A request that left and got no answer: the client cannot know, and says so (unknown).
    assert apns.deliveries() == []
    assert_truthful(apns, tokens, first)
    assert Outcome.UNKNOWN in {r.outcome for r in first}
    for token, result in outcomes_by_token(tokens, first).items():
        if token in arrived(apns):
            assert result.outcome == Outcome.UNKNOWN, result
    apns.configure(wire="")
    again = run(send_all(apns_backend(apns_options, timeout=5.0), sent))
    assert {r.outcome for r in again} == {Outcome.DELIVERED}
    assert sorted(d.token for d in apns.deliveries()) == sorted(tokens)


def test_a_stream_reset_after_delivery__unknown(fcm, fcm_options):
    fcm.configure(wire="reset_after")
    backend = FCMBackend(alias="fcm", options=fcm_options, timeout=5.0, concurrency=4)
    # The token endpoint is on the same fake: fetch the token while the wire is still clean.
    fcm.configure(wire="")
    run(send_all(backend, [message("fcm-warmup-" + "a" * 20)]))
    fcm.reset()
    fcm.configure(wire="reset_after")
    backend = FCMBackend(alias="fcm", options=fcm_options, timeout=5.0, concurrency=4)

    results = run(send_all(backend, [message(f"fcm-{i}-" + "a" * 20) for i in range(4)]))

    assert {r.outcome for r in results} == {Outcome.UNKNOWN}
    assert len(fcm.deliveries()) == 4


@pytest.mark.parametrize("fake_name", ["apns", "fcm", "webpush"])
def test_retry_after_as_an_http_date(request, fake_name):
    fake = request.getfixturevalue(fake_name)
    backend = request.getfixturevalue(f"{fake_name}_backend")
    error = {"apns": "ServiceUnavailable", "fcm": "UNAVAILABLE", "webpush": "ServiceUnavailable"}[fake_name]
    fake.configure(error=error, rate=1.0, retry_after="date:120")
    token = {
        "apns": "ab" * 32,
        "fcm": "fcm-token-" + "a" * 20,
        "webpush": fake.subscription("alice").as_token() if fake_name == "webpush" else "",
    }[fake_name]

    (result,) = run(send_all(backend, [message(token)]))

    assert result.outcome == Outcome.TEMPORARY and result.http_status == 503
    assert result.retry_after is not None and 60 < result.retry_after <= 121


def test_the_fakes_send_retry_after_dates_parseable_as_http_dates(apns, apns_backend):
    from notifications.testing.fake_state import retry_after_value

    assert parsedate_to_datetime(retry_after_value("date:30")).tzinfo is not None
    assert retry_after_value("7") == "7"


@pytest.mark.parametrize("mode", ["huge", "nul", "binary", "echo"])
def test_hostile_error_bodies_from_the_http2_fakes__cut_and_sanitized(webpush, webpush_backend, mode):
    webpush.configure(error="InternalServerError", rate=1.0, body_mode=mode, huge_bytes=4 << 20)

    (result,) = run(send_all(webpush_backend, [message(webpush.subscription("bob").as_token())]))

    assert result.outcome == Outcome.TEMPORARY and result.http_status == 500
    assert "\x00" not in result.reason and "vapid t=" not in result.reason.lower()
    # The fake is not a known push service: its body is withheld, and in any case never stored whole.
    assert len(result.reason) < 600


def test_a_trickled_answer_is_bounded_by_the_deadline(webpush, webpush_options):
    webpush.configure(error="InternalServerError", rate=1.0, body_mode="trickle", trickle_interval=0.5)
    backend = WebPushBackend(alias="webpush", options=webpush_options, timeout=SHORT, concurrency=1)

    (result,) = run(send_all(backend, [message(webpush.subscription("carol").as_token())]))

    # The status came but the body never finished: the request had left, so the outcome is unknown.
    assert result.outcome == Outcome.UNKNOWN and result.sent


def test_an_unknown_wire_fault_is_refused(apns):
    with pytest.raises(ValueError, match="unknown wire fault"):
        apns.configure(wire="chaos-monkey")


def test_a_provider_token_that_cannot_be_signed__a_configuration_error_nothing_sent(apns, apns_backend):
    class Unsignable:
        def get(self, *, refused=None):
            raise ValueError("Could not deserialize key data")

        def secret(self):
            return ""

    apns_backend.provider_token = Unsignable()

    (result,) = run(send_all(apns_backend, [message("ab" * 32)]))

    assert (result.outcome, result.sent, result.fatal, result.systemic) == (Outcome.TEMPORARY, False, True, True)
    assert "nothing was sent" in result.reason and apns.stats()["requests"] == 0

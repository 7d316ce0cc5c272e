"""Every HTTP/2 peer has a budget: frames that carry no answer, a connection with no stream, and its
share of the event loop. The hostile peer is the APNs fake under a wire fault
(`notifications.testing.wire_faults`): it floods frames that need no answer, answers `:status: abc`.

Before the budget, one Web Push endpoint flooding PINGs held 300 other users' pushes for seconds, its
idle connection kept a core busy, and closing it wrote about 10,000 "SSL connection is closed" lines.
"""

import asyncio
import logging
import re
import statistics
import time

import h2.errors
import pytest

from notifications.backends.apns import APNsBackend
from notifications.backends.base import Outcome
from notifications.backends.fcm import FCMBackend
from notifications.backends.h2transport import WASTE_LIMIT
from notifications.testing.wire_faults import FLOODS
from tests.notifications.backends.conftest import message, run
from tests.notifications.backends.test_wire_faults import apns_tokens

CALM = int(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
FCM_TOKEN = "fcm-token-" + "a" * 40  # the form the FCM fake accepts
IDLE_FLOODS = sorted(FLOODS - {"flood_ping_held", "flood_empty_data"})
CLOSED = re.compile(r"Closed the HTTP/2 connection to (\S+): the peer flooded the connection with (\d+) frames")


def hostile(options, timeout: float = 10.0) -> APNsBackend:
    return APNsBackend(alias="apns", options=options, timeout=timeout, concurrency=10)


async def until(condition, seconds: float = 20.0) -> bool:
    """Wait for `condition()` (the fake's own record of an event), polling; False if it never came."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def flood_lines(caplog) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2))) for r in caplog.records if (m := CLOSED.search(r.getMessage()))]


def assert_quiet_close(caplog, connections: int = 1) -> None:
    """One line per flooded connection, naming the frames it took to close it, and no asyncio storm."""
    lines = flood_lines(caplog)
    assert len(lines) == connections, [r.getMessage() for r in caplog.records]
    # Closed once the budget was spent: a few frames of the connection's start count too, nothing more.
    assert all(WASTE_LIMIT < frames <= WASTE_LIMIT + 10 for _, frames in lines), lines
    noise = [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.WARNING]
    assert not noise, noise[:3]


@pytest.mark.parametrize("mode", IDLE_FLOODS)
def test_a_flood_on_an_idle_connection_closes_it_with_enhance_your_calm(apns, apns_options, caplog, mode):
    caplog.set_level(logging.WARNING)
    apns.configure(wire=mode)
    wire = lambda: apns.stats()["wire"]  # noqa: E731

    async def scenario():
        backend = hostile(apns_options)
        try:
            result = await backend.send(message(apns_tokens(1)[0]))
            # The answer came first; the flood follows on a connection with no stream open.
            closed = await until(lambda: wire()["goaway_codes"] or wire()["floods_ended"])
            return result, closed
        finally:
            await backend.aclose()

    result, closed = run(scenario())
    assert result.outcome == Outcome.DELIVERED
    assert closed
    assert wire()["goaway_codes"] == [CALM]
    assert wire()["flood_frames"] < 100_000  # it stopped long before the fake's own cap
    assert_quiet_close(caplog)


@pytest.mark.parametrize("mode", ["flood_ping_held", "flood_empty_data"])
def test_a_flood_with_a_request_in_flight__the_request_ends_unknown_and_says_why(apns, apns_options, caplog, mode):
    caplog.set_level(logging.WARNING)
    apns.configure(wire=mode)
    wire = lambda: apns.stats()["wire"]  # noqa: E731

    async def scenario():
        backend = hostile(apns_options)
        try:
            result = await backend.send(message(apns_tokens(1)[0]))
            await until(lambda: wire()["goaway_codes"] or wire()["floods_ended"])  # the fake reads the GOAWAY
            return result
        finally:
            await backend.aclose()

    result = run(scenario())

    # Its HEADERS went out and the peer took it (the fake recorded the stream): it may have been acted on.
    assert result.outcome == Outcome.UNKNOWN and result.sent
    assert "flooded the connection" in result.reason
    assert apns.stats()["wire"]["goaway_codes"] == [CALM]
    assert_quiet_close(caplog)


def test_requests_sent_together_to_a_flooding_peer__unknown_exactly_for_those_it_took(apns, apns_options, caplog):
    # Each connection the peer is given holds what it takes and floods: a request either reached it
    # (unknown: it may act on it) or never left (temporary, nothing sent), never anything in between.
    caplog.set_level(logging.WARNING)
    apns.configure(wire="flood_ping_held")

    async def scenario():
        backend = hostile(apns_options)
        try:
            return await asyncio.gather(*(backend.send(message(t)) for t in apns_tokens(3)))
        finally:
            await backend.aclose()

    results = run(scenario())
    arrived = apns.stats()["wire"]["streams"]
    unknown = [r for r in results if r.outcome == Outcome.UNKNOWN]
    unsent = [r for r in results if r.outcome == Outcome.TEMPORARY and not r.sent]
    assert len(unknown) == arrived  # the streams the peer saw, and only those, may have been acted on
    assert len(unknown) + len(unsent) == 3
    assert all("flooded the connection" in r.reason for r in unknown)
    assert all("nothing was sent" in r.reason for r in unsent)


def test_a_malformed_status_ends_its_request_unknown_and_never_reaches_asyncio(apns, apns_options, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    apns.configure(wire="bad_status")

    async def scenario():
        backend = hostile(apns_options)
        try:
            return [await backend.send(message(t)) for t in apns_tokens(2)]
        finally:
            await backend.aclose()

    results = run(scenario())
    assert [r.outcome for r in results] == [Outcome.UNKNOWN] * 2
    assert all("malformed :status b'abc'" in r.reason for r in results)
    assert apns.stats()["wire"]["connections"] == 1  # a stream-level error: the connection served both
    assert not [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.WARNING]


def test_a_16_byte_window_sends_many_window_updates_and_none_of_them_is_waste(apns, apns_options, caplog):
    # Each 4 KB body goes out 16 bytes at a time, each piece after a WINDOW_UPDATE the sender waits for:
    # over a thousand frames that carry no answer, every one of which moves a request on.
    caplog.set_level(logging.WARNING)
    apns.configure(wire="tiny_window")

    async def scenario():
        backend = hostile(apns_options, timeout=20.0)
        try:
            return await asyncio.gather(*(backend.send(message(t, body="x" * 4000)) for t in apns_tokens(4)))
        finally:
            await backend.aclose()

    results = run(scenario())
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert not flood_lines(caplog)


def test_a_connection_with_no_stream_is_closed_after_the_keepalive(apns, apns_options, monkeypatch):
    from notifications.backends import h2transport

    monkeypatch.setattr(h2transport, "KEEPALIVE_SECONDS", 0.2)
    apns.configure(wire="stream_limit", stream_limit=100)  # a well-behaved peer served by the wire front door

    async def scenario():
        backend = hostile(apns_options)
        try:
            result = await backend.send(message(apns_tokens(1)[0]))
            client = backend._client
            (connection,) = [c for cs in client._connections.values() for c in cs]
            # Nobody asks for the connection again: its own timer closes it.
            return result, await until(lambda: connection.transport.is_closing(), 5.0), connection.why_closed
        finally:
            await backend.aclose()

    result, closed, why = run(scenario())
    assert result.outcome == Outcome.DELIVERED
    assert closed and why == "closed by this client"


# --- a flooding origin beside a healthy one ---------------------------------------------------------


async def timed_round(backend, size: int = 20) -> float:
    """Send `size` messages to the healthy origin at once; the round's time (every one must deliver)."""
    started = time.perf_counter()
    results = await asyncio.gather(*(backend.send(message(f"{FCM_TOKEN}{i}")) for i in range(size)))
    assert {r.outcome for r in results} == {Outcome.DELIVERED}, {r.reason for r in results}
    return time.perf_counter() - started


def test_an_origin_flooding_on_every_connection__a_healthy_origins_pushes_keep_their_pace(
    apns, apns_options, fcm, fcm_options, caplog
):
    """One hostile origin holds each request and floods PINGs on every connection it is given, again and
    again (each send opens a new connection); meanwhile a healthy origin's rounds of 20 pushes run on
    the same event loop. Its rounds stay within a small multiple of the baseline measured in this test
    before the flood (a ratio, not a time), and every flooded connection is closed at the budget."""
    caplog.set_level(logging.WARNING)
    apns.configure(wire="flood_ping_held")

    async def scenario():
        healthy = FCMBackend(alias="fcm", options=fcm_options, timeout=10.0, concurrency=20)
        attacker = hostile(apns_options)
        try:
            await timed_round(healthy)  # warm: the token and the connection
            baseline = [await timed_round(healthy) for _ in range(8)]
            floods: list = []
            stop = asyncio.Event()

            async def attack():
                while not stop.is_set():
                    floods.append(await attacker.send(message(apns_tokens(1)[0])))

            attacking = asyncio.ensure_future(attack())
            assert await until(lambda: apns.stats()["wire"]["flood_frames"] > 0)
            during = []
            while len(during) < 8 or len(floods) < 3:
                during.append(await timed_round(healthy))
                assert len(during) < 400, "the flooded connections were never closed"
            stop.set()
            await attacking
            return baseline, during, floods
        finally:
            await healthy.aclose()
            await attacker.aclose()

    baseline, during, floods = run(scenario())
    # Every healthy push was delivered (timed_round checks each), and at a pace close to the baseline's.
    ratio = statistics.median(during) / statistics.median(baseline)
    assert ratio < 5, (ratio, baseline, during)
    # The attacker's requests end honestly (unknown: each was taken, then its connection closed), and
    # each of its connections was closed at the budget, once.
    assert floods and {r.outcome for r in floods} == {Outcome.UNKNOWN}
    assert set(apns.stats()["wire"]["goaway_codes"]) == {CALM}
    assert len(flood_lines(caplog)) == len(floods)
    assert_quiet_close(caplog, connections=len(floods))

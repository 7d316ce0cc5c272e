"""Every answer is bound to its own request on kept-alive HTTP/1.1 connections (the webhook path).

The peer (`hostile_http11.HostilePeer`) echoes each request's Idempotency-Key in its answer, so a
result whose message id (or reason) names another row's key is a row finished with a stranger's answer.
Both transport paths run: the lean exchange, and httpx's streamed path that URLs with userinfo take.
"""

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notifications.backends.base import Outcome, PushMessage, SendResult
from notifications.backends.webhook import WebhookBackend
from tests.notifications.edge.hostile_http11 import GARBAGE, HostilePeer

PATHS = ["lean", "userinfo"]


def backend(peer: HostilePeer, path: str, *, concurrency: int = 1, timeout: float = 5.0) -> WebhookBackend:
    url = peer.url if path == "lean" else peer.url.replace("http://", "http://user:secret@")
    options = {"url": url, "token": "t0k"}
    return WebhookBackend(alias="default", options=options, timeout=timeout, concurrency=concurrency)


def message(token: str) -> PushMessage:
    return PushMessage(idempotency_key=str(uuid.uuid4()), token=token, title="Hi", body="there")


async def send_in_turn(hook: WebhookBackend, messages: list[PushMessage]) -> list[SendResult]:
    try:
        return [await hook.send(m) for m in messages]
    finally:
        await hook.aclose()


def assert_each_answer_is_its_own(messages: list[PushMessage], results: list[SendResult]) -> None:
    keys = {m.idempotency_key for m in messages}
    for m, result in zip(messages, results, strict=True):
        others = keys - {m.idempotency_key}
        text = result.provider_message_id + " " + result.reason
        assert not any(key in text for key in others), (m.token, result)
        assert GARBAGE not in text and "unsolicited" not in text, (m.token, result)
        if result.outcome == Outcome.DELIVERED:
            assert result.provider_message_id in ("", m.idempotency_key), (m.token, result)
        if result.token_invalid:
            assert m.token.startswith("gone-"), (m.token, result)


def tokens(n: int) -> list[PushMessage]:
    return [message(f"gone-{i}" if i % 4 == 3 else f"tok-{i}") for i in range(n)]


@pytest.mark.parametrize("echo", [False, True])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("action", ["extra", "early", "short", "408", "split", "long", "drop"])
def test_a_hostile_answer_never_lands_on_the_next_row(path: str, action: str, echo: bool) -> None:
    # echo: answers prove their key, so only the stray bytes themselves stop a connection's reuse.
    messages = tokens(12)
    with HostilePeer(default=action, echo=echo) as peer:
        results = asyncio.run(send_in_turn(backend(peer, path), messages))
    assert_each_answer_is_its_own(messages, results)
    if action in ("extra", "early", "split", "408"):
        # Each row got its own answer: delivered, or its own 410 (and only the gone tokens' devices go).
        assert [r.outcome for r in results] == [
            Outcome.PERMANENT if m.token.startswith("gone-") else Outcome.DELIVERED for m in messages
        ]
        assert [r.token_invalid for r in results] == [m.token.startswith("gone-") for m in messages]
    if action in ("extra", "early", "short", "408"):
        assert peer.connections == len(messages)  # a connection the peer spoke out of turn on is not reused
    if action in ("long", "drop"):
        # The request left and no complete answer came: the provider may have it.
        assert {r.outcome for r in results} == {Outcome.UNKNOWN}


@pytest.mark.parametrize("path", PATHS)
def test_a_well_behaved_peer_that_echoes_the_key_keeps_one_connection(path: str) -> None:
    messages = tokens(12)
    with HostilePeer(echo=True) as peer:
        results = asyncio.run(send_in_turn(backend(peer, path), messages))
    assert_each_answer_is_its_own(messages, results)
    assert peer.connections == 1
    assert all(head.get("connection") != "close" for head in peer.heads)


@pytest.mark.parametrize("path", PATHS)
def test_a_peer_that_does_not_echo_gets_one_connection_per_exchange_and_is_told_so(path: str) -> None:
    # Nothing proves that what follows an answer on such a connection is the next request's answer.
    messages = tokens(6)
    with HostilePeer() as peer:
        results = asyncio.run(send_in_turn(backend(peer, path), messages))
    assert_each_answer_is_its_own(messages, results)
    assert peer.connections == 6
    # The first request could not know; the next ones ask the peer to close after its answer.
    assert [head.get("connection") == "close" for head in peer.heads] == [False] + [True] * 5


async def send_together(hook: WebhookBackend, messages: list[PushMessage]) -> list[SendResult]:
    try:
        return list(await asyncio.gather(*(hook.send(m) for m in messages)))
    finally:
        await hook.aclose()


@pytest.mark.parametrize("echo", [True, False])
@pytest.mark.parametrize("path", PATHS)
def test_a_gateway_writing_every_answer_twice_5_ms_apart_never_answers_another_row(path: str, echo: bool) -> None:
    # The copy comes after the client may have sent its next request on the same connection: only an
    # answer that echoes its key (or a connection that carries nothing more) keeps the rows apart.
    messages = tokens(40)
    with HostilePeer(default="late", echo=echo) as peer:
        results = asyncio.run(send_together(backend(peer, path, concurrency=4), messages))
    assert_each_answer_is_its_own(messages, results)
    assert [r.outcome for r in results] == [
        Outcome.PERMANENT if m.token.startswith("gone-") else Outcome.DELIVERED for m in messages
    ]
    assert [r.token_invalid for r in results] == [m.token.startswith("gone-") for m in messages]
    assert sorted(peer.received) == sorted(m.idempotency_key for m in messages)  # each sent once
    if echo:
        assert peer.connections < 40 and peer.late_copies > 0  # connections were reused, and copies met
    else:
        assert peer.connections == 40


@pytest.mark.parametrize("path", PATHS)
def test_an_unsolicited_408_on_an_idle_connection_is_not_read_by_the_next_row(path: str) -> None:
    first, second = message("tok-1"), message("tok-2")

    async def scenario(peer: HostilePeer) -> list[SendResult]:
        hook = backend(peer, path)
        try:
            one = await hook.send(first)
            # The peer gives up on the idle keep-alive connection: a 408 and a close, nobody asked.
            assert await asyncio.to_thread(peer.idle_408) == 1
            two = await hook.send(second)
            return [one, two]
        finally:
            await hook.aclose()

    with HostilePeer(echo=True) as peer:  # answers that prove their key: the connection is kept and goes idle
        results = asyncio.run(scenario(peer))
    assert_each_answer_is_its_own([first, second], results)
    assert [r.outcome for r in results] == [Outcome.DELIVERED, Outcome.DELIVERED]
    assert peer.received == [first.idempotency_key, second.idempotency_key]


def test_an_answer_before_the_whole_request_was_written__its_connection_is_not_reused() -> None:
    # A body far larger than a socket buffer: the peer's answer to the head arrives while we still write.
    big = PushMessage(idempotency_key=str(uuid.uuid4()), token="tok-big", title="t", body="x" * (32 << 20))
    after = message("tok-after")
    with HostilePeer(plan=["early"]) as peer:
        results = asyncio.run(send_in_turn(backend(peer, "lean"), [big, after]))
    assert_each_answer_is_its_own([big, after], results)
    assert [r.outcome for r in results] == [Outcome.DELIVERED, Outcome.DELIVERED]
    assert peer.connections == 2


ACTIONS = st.sampled_from(["ok", "ok", "extra", "early", "short", "long", "split", "drop", "408", "late"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(ACTIONS, min_size=1, max_size=10),
    path=st.sampled_from(PATHS),
    concurrency=st.sampled_from([1, 3]),
    echo=st.booleans(),
)
def test_generated_answer_streams__every_stored_answer_is_its_own(
    plan: list[str], path: str, concurrency: int, echo: bool
) -> None:
    messages = tokens(len(plan))

    async def scenario(peer: HostilePeer) -> list[SendResult]:
        hook = backend(peer, path, concurrency=concurrency)
        try:
            if concurrency == 1:
                return [await hook.send(m) for m in messages]
            return list(await asyncio.gather(*(hook.send(m) for m in messages)))
        finally:
            await hook.aclose()

    with HostilePeer(plan=plan, echo=echo) as peer:
        results = asyncio.run(scenario(peer))
    assert_each_answer_is_its_own(messages, results)
    for m, result in zip(messages, results, strict=True):
        # Whatever happened, a row either has an answer carrying its own key or no answer at all.
        assert result.outcome in (Outcome.DELIVERED, Outcome.PERMANENT, Outcome.UNKNOWN), (m, result)


def test_waiting_for_a_pool_slot__temporary_nothing_sent_while_the_one_in_flight_is_unknown() -> None:
    from notifications.backends import classify
    from notifications.backends.http import ExchangeFailed, capped_request, make_client

    async def post(client, url: str, deadline: float) -> SendResult:
        try:
            headers = {"Idempotency-Key": "k"}
            await capped_request(client, "POST", url, deadline=deadline, headers=headers, content=b"{}")
        except ExchangeFailed as exc:
            return classify.failed_exchange(exc, where=url)
        raise AssertionError("the peer answered")

    async def scenario(peer: HostilePeer) -> list[SendResult]:
        client = make_client(timeout=5.0, concurrency=1)  # one connection: the second request waits for it
        try:
            hung = asyncio.ensure_future(post(client, peer.url, 2.0))
            await asyncio.sleep(0.1)
            waiting = await post(client, peer.url, 0.2)  # gives up while the first still holds the slot
            return [await hung, waiting]
        finally:
            await client.aclose()

    with HostilePeer(plan=["hang"]) as peer:
        first, second = asyncio.run(scenario(peer))
    assert (first.outcome, first.sent) == (Outcome.UNKNOWN, True)
    assert (second.outcome, second.sent) == (Outcome.TEMPORARY, False)
    assert "waiting for a free connection" in second.reason and "nothing was sent" in second.reason
    assert len(peer.received) == 1

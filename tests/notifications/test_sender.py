"""The sender alone: its loop runs on its own thread, so sends move while the caller's thread is busy."""

import asyncio
import threading

import pytest

from notifications.backends import Outcome, PushBackend, PushMessage, SendResult
from notifications.delivery.inbox import Inbox
from notifications.delivery.sender import ANSWER, AsyncSender, build_result_missing


class Scripted(PushBackend):
    """A backend whose sends report to the test thread and answer what `answer(message)` says."""

    def __init__(self, answer, timeout: float = 5.0) -> None:
        super().__init__(alias="default", options={}, timeout=timeout, concurrency=10)
        self.answer = answer
        self.sent: list[str] = []
        self.closed = threading.Event()
        self.all_sent = threading.Event()
        self.expected = 0

    async def send(self, message: PushMessage) -> SendResult:
        self.sent.append(message.idempotency_key)
        if len(self.sent) >= self.expected:
            self.all_sent.set()
        return await self.answer(message)

    async def aclose(self) -> None:
        self.closed.set()


def _messages(n: int, backend: str = "default") -> list[tuple[int, PushMessage]]:
    return [(i, PushMessage(idempotency_key=f"k{i}", token="t", title="", body="", backend=backend)) for i in range(n)]


async def _delivered(message: PushMessage) -> SendResult:
    await asyncio.sleep(0)
    return SendResult(outcome=Outcome.DELIVERED, provider_message_id=message.idempotency_key)


def test_sends_go_out_and_answer_while_the_callers_thread_never_steps_a_loop():
    backend = Scripted(_delivered)
    backend.expected = 5
    sender = AsyncSender({"default": backend}, missing=build_result_missing)
    try:
        sender.submit(_messages(5))
        # The caller only blocks (as on a database round trip); the sender's own thread does the sending.
        assert backend.all_sent.wait(10)
        answers: list = []
        while len(answers) < 5:
            answers += sender.collect(10)
        assert sorted(key for key, _ in answers) == [0, 1, 2, 3, 4]
        assert {result.provider_message_id for _, result in answers} == {f"k{i}" for i in range(5)}
        assert sender.in_flight == 0
    finally:
        sender.close()
    assert backend.closed.is_set()


def test_a_backend_that_raises_overruns_or_is_missing_still_answers():
    async def broken(message: PushMessage) -> SendResult:
        if message.idempotency_key == "k0":
            raise RuntimeError("boom")
        await asyncio.sleep(30)  # overruns its 0.05 s timeout (plus the grace)
        raise AssertionError("not reached")

    sender = AsyncSender({"default": Scripted(broken, timeout=0.05)}, missing=build_result_missing)
    try:
        sender.submit(
            _messages(2) + [(9, PushMessage(idempotency_key="k9", token="t", title="", body="", backend="gone"))]
        )
        answers: dict = {}
        while len(answers) < 3:
            answers.update(sender.collect(10))
    finally:
        sender.close()
    assert (
        answers[0].outcome == Outcome.UNKNOWN
        and "raised instead of answering (RuntimeError: boom)" in answers[0].reason
    )
    assert answers[1].outcome == Outcome.UNKNOWN and "overran its 0.05 s deadline" in answers[1].reason
    assert answers[9].outcome == Outcome.TEMPORARY and "No push backend 'gone'" in answers[9].reason


def test_close_cancels_what_is_still_in_flight():
    async def never(message: PushMessage) -> SendResult:
        await asyncio.sleep(3600)
        raise AssertionError("not reached")

    backend = Scripted(never, timeout=3600)
    backend.expected = 3
    sender = AsyncSender({"default": backend}, missing=build_result_missing)
    sender.submit(_messages(3))
    assert backend.all_sent.wait(10)
    sender.close()
    assert backend.closed.is_set()
    assert not sender._thread.is_alive()


class _CountingCondition(threading.Condition):
    waits = 0

    def wait(self, timeout=None):
        type(self).waits += 1
        return super().wait(timeout)


def test_inbox__an_item_posted_before_the_wait_is_taken_without_sleeping(monkeypatch):
    # The old sender cleared its "arrived" flag before waiting, so an answer already in was missed and
    # the worker slept for up to a second. The inbox checks for items under the posters' lock first.
    inbox = Inbox()
    inbox._ready = _CountingCondition()
    inbox.post(ANSWER, ("key", "result"))
    assert inbox.take(60) == [(ANSWER, ("key", "result"))]
    assert _CountingCondition.waits == 0


def test_inbox__a_post_from_another_thread_wakes_the_taker():
    inbox = Inbox()
    poster = threading.Timer(0.01, inbox.post, args=("done", 1))
    poster.start()
    try:
        assert inbox.take(30) == [("done", 1)]
    finally:
        poster.join()


@pytest.mark.parametrize("timeout", [0, 0.01])
def test_inbox__nothing_posted_returns_nothing(timeout):
    assert Inbox().take(timeout) == []

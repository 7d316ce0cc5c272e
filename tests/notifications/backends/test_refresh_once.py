"""`PushBackend.send_refreshing_once()`: a refused credential is replaced once, and only once."""

import asyncio

import httpx

from notifications.backends.base import Outcome, PushBackend, PushMessage, SendResult
from notifications.backends.http import CappedResponse


class _Backend(PushBackend):
    async def send(self, message: PushMessage) -> SendResult:  # pragma: no cover - not used here
        raise NotImplementedError


def _backend() -> _Backend:
    return _Backend(alias="test", options={}, timeout=1.0, concurrency=1)


def _answer(status: int) -> CappedResponse:
    return CappedResponse(status=status, headers=httpx.Headers(), body=b"", truncated=False, latency_ms=1)


def _run(statuses: list[int], *, credential_fails: bool = False) -> tuple[SendResult, list[object], list[str]]:
    """Send through the template against answers in `statuses`; return the result, what the credential
    was asked with, and which credentials went out."""
    asked: list[object] = []
    sent: list[str] = []
    answers = iter(statuses)

    async def credential(refused: str | None) -> str | SendResult:
        asked.append(refused)
        if credential_fails:
            return SendResult(outcome=Outcome.TEMPORARY, reason="no key", sent=False)
        return f"token-{len(asked)}"

    async def exchange(token: str) -> CappedResponse | SendResult:
        sent.append(token)
        return _answer(next(answers))

    def classify(response: CappedResponse, token: str, again: bool) -> SendResult:
        outcome = Outcome.DELIVERED if response.status == 200 else Outcome.TEMPORARY
        return SendResult(outcome=outcome, reason=f"{token} again={again}", http_status=response.status)

    result = asyncio.run(
        _backend().send_refreshing_once(
            credential, exchange, refuses=lambda response: response.status == 401, classify=classify
        )
    )
    return result, asked, sent


def test_a_refused_credential__is_replaced_once_and_the_message_sent_again() -> None:
    result, asked, sent = _run([401, 200])
    assert asked == [None, "token-1"]  # the second ask names the refused credential
    assert sent == ["token-1", "token-2"]
    assert (result.outcome, result.reason) == (Outcome.DELIVERED, "token-2 again=True")


def test_a_second_refusal__is_classified_not_retried() -> None:
    result, asked, sent = _run([401, 401])
    assert len(sent) == 2 and len(asked) == 2
    assert (result.http_status, result.reason) == (401, "token-2 again=True")


def test_an_answer_that_does_not_refuse_the_credential__is_classified_at_once() -> None:
    result, asked, sent = _run([503])
    assert asked == [None] and sent == ["token-1"]
    assert result.reason == "token-1 again=False"


def test_no_credential__nothing_is_sent() -> None:
    result, asked, sent = _run([], credential_fails=True)
    assert asked == [None] and sent == []
    assert result.sent is False and result.reason == "no key"

"""The Instance ID client's reading of answers, against httpx.MockTransport: no server, no database."""

import json

import httpx
import pytest

from notifications.backends.credentials import CredentialsRefused, CredentialsUnreachable
from notifications.backends.iid import (
    MAX_TOKENS,
    IIDRefused,
    IIDTemporary,
    InstanceIdClient,
    read_answer,
    request_body,
    topic_name,
)
from weave.jobs import Fail

TOKENS = ["a" * 20, "b" * 20, "c" * 20]


class Tokens:
    """A token source that hands out numbered tokens and remembers which were refused."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.issued = 0
        self.refused: list[str | None] = []

    def get(self, *, refused: str | None = None) -> str:
        if self.error is not None:
            raise self.error
        self.refused.append(refused)
        self.issued += 1
        return f"ya29.token-{self.issued}"


def client_answering(*answers, seen=None, credentials=None):
    answers = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return InstanceIdClient(
        credentials=credentials or Tokens(), base_url="https://iid.test", transport=httpx.MockTransport(handler)
    )


def test_batch__posts_the_topic_and_tokens_with_the_oauth_token_and_reads_one_code_per_token():
    seen: list[httpx.Request] = []
    results = {"results": [{}, {"error": "NOT_FOUND"}, {"error": "INVALID_ARGUMENT"}]}
    client = client_answering(httpx.Response(200, json=results), seen=seen)

    codes = client.batch("subscribe", "/topics/news", TOKENS)

    assert codes == ["", "NOT_FOUND", "INVALID_ARGUMENT"]
    (request,) = seen
    assert str(request.url) == "https://iid.test/iid/v1:batchAdd"
    assert request.headers["authorization"] == "Bearer ya29.token-1"
    assert request.headers["access_token_auth"] == "true"
    assert json.loads(request.content) == {"to": "/topics/news", "registration_tokens": TOKENS}


def test_batch__unsubscribe_goes_to_batch_remove():
    seen: list[httpx.Request] = []
    client = client_answering(httpx.Response(200, json={"results": [{}]}), seen=seen)

    assert client.batch("unsubscribe", "news", TOKENS[:1]) == [""]
    assert seen[0].url.path == "/iid/v1:batchRemove"


def test_batch__a_401_replaces_the_token_once_then_refuses():
    tokens = Tokens()
    client = client_answering(
        httpx.Response(401, json={"error": "Unauthorized"}),
        httpx.Response(200, json={"results": [{}]}),
        credentials=tokens,
    )
    assert client.batch("subscribe", "news", TOKENS[:1]) == [""]
    assert tokens.refused == [None, "ya29.token-1"]

    twice = client_answering(
        httpx.Response(401, json={"error": "Unauthorized"}), httpx.Response(401, json={"error": "Unauthorized"})
    )
    with pytest.raises(IIDRefused, match="refused our access token"):
        twice.batch("subscribe", "news", TOKENS[:1])


@pytest.mark.parametrize("status", [429, 500, 503])
def test_read__throttled_and_server_errors_are_temporary_with_retry_after(status):
    with pytest.raises(IIDTemporary) as caught:
        read_answer(status, {"retry-after": "7"}, b'{"error": "Unavailable"}', tokens=1, secrets=[])
    assert caught.value.retry_after == 7.0 and f"HTTP {status}" in str(caught.value)
    assert not isinstance(caught.value, Fail)


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (400, b'{"error": "InvalidParameters: to"}', "InvalidParameters: to"),
        (403, b'{"error": "PERMISSION_DENIED"}', "refused the service account"),
        (404, b"<html>not here</html>", "HTTP 404"),
        (302, b"", "HTTP 302"),
    ],
)
def test_read__other_refusals_fail_the_job_for_good(status, body, said):
    with pytest.raises(IIDRefused, match=said) as caught:
        read_answer(status, {}, body, tokens=1, secrets=[])
    assert isinstance(caught.value, Fail)


@pytest.mark.parametrize(
    "body", [b"not json", b'{"results": "x"}', b'{"results": [{}]}', b"[]", b'{"results": [{}, {}, {}, {}]}']
)
def test_read__a_200_without_one_result_per_token_is_temporary(body):
    with pytest.raises(IIDTemporary, match="one result per token"):
        read_answer(200, {}, body, tokens=3, secrets=[])


def test_read__secrets_never_reach_the_reason():
    with pytest.raises(IIDRefused) as caught:
        read_answer(400, {}, b'{"error": "bad ya29.secret-token"}', tokens=1, secrets=["ya29.secret-token"])
    assert "ya29.secret-token" not in str(caught.value)


def test_batch__connect_failures_and_timeouts_are_temporary():
    refused = client_answering(httpx.ConnectError("refused"))
    with pytest.raises(IIDTemporary, match="nothing was sent"):
        refused.batch("subscribe", "news", TOKENS[:1])
    slow = client_answering(httpx.ReadTimeout("slow"))
    with pytest.raises(IIDTemporary, match="may have been applied"):
        slow.batch("subscribe", "news", TOKENS[:1])


def test_batch__credentials_decide_between_temporary_and_refused():
    down = client_answering(credentials=Tokens(CredentialsUnreachable("token endpoint down")))
    with pytest.raises(IIDTemporary, match="nothing was sent"):
        down.batch("subscribe", "news", TOKENS[:1])
    bad = client_answering(credentials=Tokens(CredentialsRefused("invalid_grant")))
    with pytest.raises(IIDRefused, match="credentials_file"):
        bad.batch("subscribe", "news", TOKENS[:1])


@pytest.mark.parametrize("bad", ["", "/topics/", "news!", "a b", "x" * 901, None, 7, "new\nline"])
def test_topic_name__refuses_what_fcm_refuses_and_bounds_the_length(bad):
    with pytest.raises(ValueError, match="topic name"):
        topic_name(bad)


def test_topic_name__takes_the_prefix_and_the_allowed_characters():
    assert topic_name("/topics/a-Z_0.~%") == "a-Z_0.~%"


def test_request_body__takes_one_to_a_thousand_tokens():
    assert len(request_body("news", ["t" * 20] * MAX_TOKENS)["registration_tokens"]) == MAX_TOKENS
    for count in (0, MAX_TOKENS + 1):
        with pytest.raises(ValueError, match="1 to 1000"):
            request_body("news", ["t" * 20] * count)

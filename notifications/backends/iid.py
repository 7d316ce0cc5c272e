"""FCM topic subscriptions through Google's Instance ID batch API (`iid/v1:batchAdd` and `:batchRemove`).

    client = InstanceIdClient.for_backend("fcm")      # the FCM backend's service account and trust
    codes = client.batch("subscribe", "news", tokens)  # one code per token: "" when it was applied

One request names a topic and up to 1,000 registration tokens and is authorised by the same OAuth2
access token as FCM sends (plus `access_token_auth: true`, which tells IID the bearer is an OAuth
token, not a legacy server key). The answer is one result per token, in order: `{}` when applied,
`{"error": "NOT_FOUND"}` and the like when not. What the whole request got decides the exception:

- `IIDTemporary`: 429, 5xx, a 200 that is not a result per token, no answer, no access token. Adding
  a token to a topic twice (or removing it twice) changes nothing, so a retry is always safe, even
  after a timeout that may have applied the batch.
- `IIDRefused` (a `weave.jobs.Fail`): any other refusal (a bad request, a project the service
  account may not manage, a redirect). Sending it again would be refused again.

No database here: the job that uses it (`notifications.topics`) keeps the lease and the receipts.
"""

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import httpx

from notifications.backends.credentials import (
    CredentialsRefused,
    CredentialsUnreachable,
    GoogleAccessToken,
    shared,
    tls_context,
)
from weave.edge import HttpClass, http_class, outside_text, parse_retry_after, safe_url
from weave.jobs import Fail

IID_URL = "https://iid.googleapis.com"
PATHS = {"subscribe": "/iid/v1:batchAdd", "unsubscribe": "/iid/v1:batchRemove"}
MAX_TOKENS = 1000  # IID's own limit per request
TOPIC_MAX = 900  # FCM's topic names are short in practice; this bounds what a user can make us store
TOPIC_NAME = re.compile(r"[a-zA-Z0-9\-_.~%]+")
TOPIC_PREFIX = "/topics/"
# Per-token codes that say the token itself is gone or was never a token: its device is deactivated.
DEAD_TOKEN_CODES = frozenset({"NOT_FOUND", "INVALID_ARGUMENT"})
# Per-token codes that a later try may turn into success (Google's side failed for that token).
RETRYABLE_CODES = frozenset({"INTERNAL", "UNAVAILABLE"})
BODY_CAP = 1024 * 1024  # 1,000 results are about 20 KiB; more than this is not an answer


class IIDTemporary(Exception):
    """The batch did not get an answer per token this time; trying again is safe."""

    def __init__(self, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class IIDRefused(Fail):
    """IID refused the whole request; the same request would be refused again."""


class TokenSource(Protocol):
    def get(self, *, refused: str | None = None) -> str: ...


def topic_name(value: Any) -> str:
    """Return the bare topic name of `value` (a `/topics/` prefix is dropped), or raise ValueError saying why."""
    if not isinstance(value, str):
        raise ValueError(f"A topic name is a string, not {type(value).__name__}.")
    name = value.removeprefix(TOPIC_PREFIX)
    if not 1 <= len(name) <= TOPIC_MAX or not TOPIC_NAME.fullmatch(name):
        raise ValueError(f"A topic name is 1 to {TOPIC_MAX} of the characters a-z A-Z 0-9 - _ . ~ %.")
    return name


def request_body(topic: str, tokens: Sequence[str]) -> dict[str, Any]:
    """The JSON body of one batch request."""
    if not 1 <= len(tokens) <= MAX_TOKENS:
        raise ValueError(f"One IID batch takes 1 to {MAX_TOKENS} tokens, not {len(tokens)}.")
    return {"to": f"{TOPIC_PREFIX}{topic_name(topic)}", "registration_tokens": list(tokens)}


def read_answer(status: int, headers: Mapping[str, str], body: bytes, *, tokens: int, secrets: list[str]) -> list[str]:
    """One code per token ("" when applied) from an IID answer, or the exception the whole answer stands for."""
    said = outside_text(_error_text(body) or body.strip(), secrets=secrets, limit=300) or "an empty body"
    kind = http_class(status)
    if kind == HttpClass.SUCCESS:
        return _results(body, tokens=tokens, said=said, status=status)
    if kind in (HttpClass.THROTTLED, HttpClass.SERVER, HttpClass.TIMEOUT):
        retry_after = parse_retry_after(headers.get("retry-after"), headers.get("date"))
        asked = f"Retry-After {retry_after:g} s" if retry_after is not None else "no Retry-After"
        raise IIDTemporary(f"IID answered HTTP {status} ({asked}): {said}", retry_after=retry_after)
    if kind == HttpClass.AUTH:
        what = "refused our access token" if status == 401 else "refused the service account for this project"
        raise IIDRefused(f"IID {what} (HTTP {status}): {said}")
    raise IIDRefused(f"IID refused the request (HTTP {status}): {said}")


def _error_text(body: bytes) -> str:
    """IID's own error word (`{"error": "InvalidParameters: ..."}`), or "" when the body has none."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, dict):  # the Google API error shape, from a front end
        error = error.get("message") or error.get("status")
    return str(error) if isinstance(error, str) else ""


def _results(body: bytes, *, tokens: int, said: str, status: int) -> list[str]:
    try:
        results = json.loads(body).get("results")
    except (ValueError, UnicodeDecodeError, AttributeError):
        results = None
    if not isinstance(results, list) or len(results) != tokens:
        got = len(results) if isinstance(results, list) else "no"
        raise IIDTemporary(f"IID answered HTTP {status} without one result per token ({got} for {tokens}): {said}")
    codes = []
    for item in results:
        error = item.get("error", "") if isinstance(item, dict) else "MALFORMED_RESULT"
        codes.append(outside_text(str(error), limit=60))
    return codes


class InstanceIdClient:
    """Blocking IID batch calls under one timeout each; the access token is the FCM backend's, shared."""

    def __init__(
        self,
        *,
        credentials: TokenSource,
        base_url: str = IID_URL,
        verify: Any = True,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.credentials = credentials
        self.base_url = base_url.rstrip("/")
        self.verify = verify
        self.timeout = timeout
        self.transport = transport

    @classmethod
    def for_backend(cls, alias: str, *, timeout: float) -> "InstanceIdClient":
        """A client with the service account, trust and IID URL of FCM backend `alias` (IIDRefused if not FCM)."""
        options, credentials = fcm_topic_access(alias, timeout=timeout)
        base_url = options.get("iid_url") or IID_URL
        return cls(
            credentials=credentials, base_url=base_url, verify=tls_context(options.get("ca_file")), timeout=timeout
        )

    def batch(self, action: str, topic: str, tokens: Sequence[str]) -> list[str]:
        """Subscribe (`action="subscribe"`) or unsubscribe `tokens` to or from `topic`; one code per token."""
        url = f"{self.base_url}{PATHS[action]}"
        content = json.dumps(request_body(topic, tokens), separators=(",", ":")).encode()
        status, headers, body, token = with_access_token(
            self.credentials, lambda token: self._post(url, content, token)
        )
        return read_answer(status, headers, body, tokens=len(tokens), secrets=[token])

    def _post(self, url: str, content: bytes, token: str) -> tuple[int, httpx.Headers, bytes]:
        with httpx.Client(
            verify=self.verify, timeout=self.timeout, follow_redirects=False, transport=self.transport
        ) as client:
            # The batch may have been applied; applying it again changes nothing, so it is retried.
            return exchange(
                client, "POST", url, token, content, self.timeout, what="an IID",
                unanswered="the batch may have been applied, and is sent again (it is idempotent).",
                headers={"access_token_auth": "true"},
            )  # fmt: skip


def exchange(
    client: httpx.Client,
    method: str,
    url: str,
    token: str,
    content: bytes | None,
    timeout: float,
    *,
    what: str,
    unanswered: str,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, httpx.Headers, bytes]:
    """One authorised request to Google and its capped answer; `IIDTemporary` when none came (`unanswered`
    says what becomes of a request that may have been applied)."""
    sent = {"Authorization": f"Bearer {token}", **(headers or {}), "Accept-Encoding": "identity"}
    if content is not None:
        sent["Content-Type"] = "application/json"
    where = safe_url(url.split("?", 1)[0])
    # httpx bounds each read, not the exchange: a peer that trickles its answer is cut off here.
    deadline = time.monotonic() + timeout
    try:
        with client.stream(method, url, content=content, headers=sent) as response:
            body = read_capped(response, where=where, what=what, deadline=deadline, timeout=timeout)
            return response.status_code, response.headers, body
    except httpx.ConnectError as exc:
        raise IIDTemporary(f"{where} is unreachable ({type(exc).__name__}); nothing was sent.") from None
    except httpx.HTTPError as exc:
        said = outside_text(str(exc), secrets=[token], limit=200)
        raise IIDTemporary(f"{where} gave no answer ({type(exc).__name__}: {said}); {unanswered}") from None


def with_access_token(
    credentials: TokenSource, exchange: Callable[[str], tuple[int, httpx.Headers, bytes]]
) -> tuple[int, httpx.Headers, bytes, str]:
    """`exchange(access_token)`, once more with a fresh token after a 401 (which applied nothing)."""
    token = _access_token(credentials, refused=None)
    status, headers, body = exchange(token)
    if status == 401:
        token = _access_token(credentials, refused=token)
        status, headers, body = exchange(token)
    return status, headers, body, token


def _access_token(credentials: TokenSource, *, refused: str | None) -> str:
    try:
        return credentials.get(refused=refused)
    except CredentialsRefused as exc:
        raise IIDRefused(f"Not sent: {exc}. Check the FCM backend's credentials_file.") from None
    except CredentialsUnreachable as exc:
        raise IIDTemporary(f"Could not get an access token: {exc}; nothing was sent.") from None


def read_capped(response: httpx.Response, *, where: str, what: str, deadline: float, timeout: float) -> bytes:
    """The body of a streamed answer, refused past BODY_CAP bytes or past `deadline` (httpx bounds each read,
    not the whole answer: a peer that trickles it is cut off here)."""
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > BODY_CAP:
            raise IIDTemporary(f"{where} answered with more than {BODY_CAP} bytes; not {what} answer.")
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout(f"the answer took more than {timeout:g} s")
    return body


def fcm_topic_access(alias: str, *, timeout: float) -> tuple[dict[str, Any], Any]:
    """(OPTIONS, shared access token) of FCM backend `alias`, for topic calls (IIDRefused if it is not FCM)."""
    from notifications.backends import backend_configs
    from notifications.backends.fcm import FCMBackend
    from notifications.backends.registry import backend_class

    config = backend_configs().get(alias)
    if config is None or not issubclass(backend_class(config["BACKEND"]), FCMBackend):
        raise IIDRefused(f"Backend {alias!r} is not an FCM backend in WEAVE PUSH_BACKENDS (any more).")
    options: dict[str, Any] = config.get("OPTIONS") or {}
    credentials_file, ca_file = str(options["credentials_file"]), options.get("ca_file")
    # The same cache key as the FCM backend's: one access token serves sends and topic calls.
    credentials = shared(
        ("fcm", credentials_file, ca_file),
        lambda: GoogleAccessToken(credentials_file, ca_file=ca_file, timeout=timeout),
    )
    return options, credentials

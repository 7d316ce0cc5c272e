"""The Instance ID batch endpoints of the FCM fake: `POST /iid/v1:batchAdd` and `/iid/v1:batchRemove`.

Served by `FakeFCM` on the same server (point the backend's `iid_url` at `fcm.url`), and as strict as
Google where a client can go wrong:
- authorisation: a live bearer token from the fake's own token endpoint, and `access_token_auth: true`
  (without it IID reads the bearer as a legacy server key and refuses it): else 401;
- the body: a JSON object with `to` = `/topics/<name>`, the name of `[a-zA-Z0-9-_.~%]+`, and
  `registration_tokens`, a list of 1 to 1,000 strings: else 400 with IID's `{"error": "<word>"}`;
- one result per token, in order: `{}` when applied, `{"error": "INVALID_ARGUMENT"}` for a string that
  is not a token, `{"error": "NOT_FOUND"}` for a dead one (`dead-...`, or `unregister()`ed on the fake).

Test controls: `script` (HTTP statuses to answer next, one per request: 429, 500, 503), `retry_after`,
`internal` (tokens answered INTERNAL once each), `hold()` (the next request waits inside the server
until released, so a test can act while a call is in flight), and `subscribers(topic)`. The v1
topic-subscription endpoints (`fake_fcm_topics`) share this state, these controls and `calls`.
"""

import asyncio
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from notifications.testing.asgi_fake import Request, Response
from notifications.testing.fake_state import retry_after_value

T = TypeVar("T")
IID_PATHS = {"/iid/v1:batchAdd": "add", "/iid/v1:batchRemove": "remove"}
MAX_TOKENS = 1000
_TOPIC_RE = re.compile(r"/topics/[a-zA-Z0-9\-_.~%]+")
_ERROR_WORDS = {429: "QuotaExceeded", 500: "InternalServerError", 503: "Unavailable"}


@dataclass
class IidCall:
    """One batch request as the fake saw it."""

    operation: str  # "add" or "remove" (and "get" or "list" on the v1 API)
    topic: str
    tokens: int
    status: int
    authorization: str
    api: str = "iid"  # or "v1"
    registration: str = ""  # the one registration a v1 call names


class FakeInstanceId:
    """The IID batch API's state: topic subscribers, scripted faults and the calls seen."""

    def __init__(self, *, authorised: Callable[[Request], bool], dead: Callable[[str], bool], token_re: Any) -> None:
        self._authorised = authorised
        self._dead = dead
        self._token_re = token_re
        self.lock = threading.Lock()
        self.topics: dict[str, set[str]] = {}
        self.calls: list[IidCall] = []
        self.script: list[int] = []
        self.retry_after: str | None = None  # seconds, or "date:<seconds>" (fake_state.retry_after_value)
        self.internal: set[str] = set()
        self._gate: threading.Event | None = None
        self.arrived = threading.Event()  # set when a held request reached the fake

    def reset(self) -> None:
        with self.lock:
            self.topics.clear()
            self.calls.clear()
            self.script.clear()
            self.retry_after = None
            self.internal.clear()
            self._gate = None
            self.arrived.clear()

    def subscribers(self, topic: str) -> set[str]:
        with self.lock:
            return set(self.topics.get(topic, set()))

    def hold(self) -> threading.Event:
        """Make the next request wait inside the server until the returned event is set."""
        gate = threading.Event()
        with self.lock:
            self._gate = gate
            self.arrived.clear()
        return gate

    async def held(self, answer: Callable[[], T]) -> T:
        """Wait at the gate if `hold()` set one, then answer (the state is read after the wait)."""
        with self.lock:
            gate, self._gate = self._gate, None
        if gate is not None:
            self.arrived.set()
            await asyncio.to_thread(gate.wait, 30.0)  # the server's loop goes on serving others meanwhile
        return answer()

    def record(self, operation: str, topic: str, tokens: int, status: int, request: Request, **more: str) -> None:
        with self.lock:
            self.calls.append(
                IidCall(operation, topic, tokens, status, request.headers.get("authorization", ""), **more)
            )

    def authorised(self, request: Request) -> bool:
        return self._authorised(request)

    def dead(self, token: str) -> bool:
        return self._dead(token)

    def next_status(self) -> tuple[int, str | None]:
        """The scripted status for the next call (200 when none is left) and the Retry-After to send."""
        with self.lock:
            return (self.script.pop(0) if self.script else 200), self.retry_after

    async def handle(self, request: Request) -> Response:
        operation = IID_PATHS[request.path]
        response, topic, tokens = await self.held(lambda: self._answer(request, operation))
        self.record(operation, topic, len(tokens), response.status, request)
        return response

    def _answer(self, request: Request, operation: str) -> tuple[Response, str, list[str]]:
        if not self._authorised(request) or request.headers.get("access_token_auth", "").lower() != "true":
            return Response.json(401, {"error": "Unauthorized"}), "", []
        try:
            body = request.json()
        except (ValueError, UnicodeDecodeError):
            return _refused("InvalidJson"), "", []
        if not isinstance(body, dict):
            return _refused("InvalidJson"), "", []
        to, tokens = body.get("to"), body.get("registration_tokens")
        if not isinstance(to, str) or not _TOPIC_RE.fullmatch(to):
            return _refused("InvalidParameters: to must be /topics/ and a name of [a-zA-Z0-9-_.~%]+"), "", []
        if not isinstance(tokens, list) or not 1 <= len(tokens) <= MAX_TOKENS:
            return _refused(f"InvalidParameters: registration_tokens must hold 1 to {MAX_TOKENS} tokens"), to, []
        if not all(isinstance(token, str) for token in tokens):
            return _refused("InvalidParameters: registration_tokens must be strings"), to, []
        topic = to.removeprefix("/topics/")
        status, retry_after = self.next_status()
        if status != 200:
            headers = {"retry-after": retry_after_value(retry_after)} if retry_after else {}
            return Response.json(status, {"error": _ERROR_WORDS.get(status, "Error")}, headers), topic, tokens
        return Response.json(200, {"results": [self._apply(operation, topic, t) for t in tokens]}), topic, tokens

    def _apply(self, operation: str, topic: str, token: str) -> dict[str, str]:
        if not self._token_re.match(token):
            return {"error": "INVALID_ARGUMENT"}
        if self._dead(token):
            return {"error": "NOT_FOUND"}
        with self.lock:
            if token in self.internal:
                self.internal.discard(token)
                return {"error": "INTERNAL"}
            members = self.topics.setdefault(topic, set())
            if operation == "add":
                members.add(token)
            else:
                members.discard(token)
        return {}


def _refused(word: str) -> Response:
    return Response(400, json.dumps({"error": word}).encode(), {"content-type": "application/json"})

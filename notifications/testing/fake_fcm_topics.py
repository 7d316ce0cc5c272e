"""FCM's v1 topic-subscription API in the FCM fake: `projects/{project}/registrations/{id}/topicSubscriptions`.

Served by `FakeFCM` on the same server as sends (the backend's `base_url`), sharing the subscribers,
the scripted faults, `hold()` and the call log with the Instance ID batch endpoints (`fake_fcm_iid`),
so a test may mix both APIs and look at one state. As strict as the real API where a client can go
wrong:

- `POST .../registrations/{id}/topicSubscriptions?topicName={topic}` (`topic_name` too) with a JSON
  object body: 200 and the `TopicSubscription`, or 409 `ALREADY_EXISTS`;
- `DELETE .../topicSubscriptions/{topic}`: 200 `{}`; a subscription that is not there is 404 unless
  `allowMissing=true`;
- `GET .../topicSubscriptions/{topic}`: the subscription or 404; `GET .../topicSubscriptions` with
  `pageSize` (at most 2,000; 1,000 by default) and `pageToken`: `topic_subscriptions` and
  `next_page_token`;
- a live bearer token (else 401 UNAUTHENTICATED), the fake's project (else 403), a topic of
  `[a-zA-Z0-9-_.~%]{1,900}` (else 400), a registration that is a registration token or a Firebase
  installation ID (else 400 INVALID_ARGUMENT) and that exists (a `dead-` token, or one passed to
  `unregister()`, is 404 with FcmError `UNREGISTERED`), any other method or path shape 404.
"""

import json
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from notifications.testing.asgi_fake import Request, Response
from notifications.testing.fake_state import retry_after_value

if TYPE_CHECKING:
    from notifications.testing.fake_fcm_iid import FakeInstanceId

PATH = re.compile(r"^/v1/projects/([^/]+)/registrations/([^/]+)/topicSubscriptions(?:/([^/]*))?$")
TOPIC = re.compile(r"[a-zA-Z0-9\-_.~%]{1,900}")
# A Firebase installation ID: 22 characters of URL-safe base64 whose first four bits are 0111 (c, d, e or f).
FID = re.compile(r"[cdef][A-Za-z0-9_\-]{21}")
FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
_BODY_FIELDS = {"name", "topic_name", "topicName", "create_time", "createTime"}
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}  # fmt: skip


def error(status: int, message: str, *, code: str | None = None) -> Response:
    """A Google API error body, with an FcmError detail when `code` is given."""
    body: dict[str, Any] = {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}
    if code is not None:
        body["details"] = [{"@type": FCM_ERROR_TYPE, "errorCode": code}]
    return Response.json(status, {"error": body})


class FakeTopicSubscriptions:
    """The v1 topic-subscription endpoints over the shared topic state of `state` (a `FakeInstanceId`)."""

    def __init__(self, state: "FakeInstanceId", *, project_id: str, token_re: Any) -> None:
        self.state = state
        self.project_id = project_id
        self.token_re = token_re
        self.created: dict[tuple[str, str], str] = {}  # (topic, registration) -> create_time

    def reset(self) -> None:
        self.created.clear()

    async def handle(self, request: Request, match: "re.Match[str]") -> Response:
        project, registration, topic = match.group(1), match.group(2), match.group(3)
        operation = _operation(request.method, topic is not None)
        response = await self.state.held(lambda: self._answer(request, operation, project, registration, topic))
        self.state.record(operation or request.method, topic or "", 1, response.status, request, api="v1",
                          registration=registration)  # fmt: skip
        return response

    def _answer(self, request: Request, operation: str, project: str, registration: str, topic: str | None) -> Response:
        if not operation:
            return error(404, f"Method not found: {request.method} on this resource.")
        if not self.state.authorised(request):
            return error(401, "Request had invalid authentication credentials.", code=None)
        if project != self.project_id:
            return error(403, f"Permission denied on project {project}.")
        query = {k: v[-1] for k, v in parse_qs(request.query, keep_blank_values=True).items()}
        if operation == "add":
            topic = query.get("topicName", query.get("topic_name", ""))
        if topic is not None and not TOPIC.fullmatch(topic):
            return error(400, "Invalid topic name: it must match [a-zA-Z0-9-_.~%]{1,900}.")
        refused = self._registration_refused(registration) or self._scripted()
        if refused is not None:
            return refused
        return self._apply(operation, registration, topic or "", query, request)

    def _registration_refused(self, registration: str) -> Response | None:
        if not (self.token_re.match(registration) or FID.fullmatch(registration)):
            return error(400, "The registration is not a valid FCM registration token or installation ID.",
                         code="INVALID_ARGUMENT")  # fmt: skip
        if self.state.dead(registration):
            return error(404, "Requested registration was not found.", code="UNREGISTERED")
        return None

    def _scripted(self) -> Response | None:
        status, retry_after = self.state.next_status()
        if status == 200:
            return None
        headers = {"retry-after": retry_after_value(retry_after)} if retry_after else {}
        response = error(status, "The service is currently unavailable." if status >= 500 else "Quota exceeded.")
        response.headers.update(headers)
        return response

    def _apply(
        self, operation: str, registration: str, topic: str, query: dict[str, str], request: Request
    ) -> Response:
        if operation == "list":
            return self._list(registration, query)
        with self.state.lock:
            members = self.state.topics.setdefault(topic, set())
            present = registration in members
            if operation == "add":
                body_error = _body_error(request)
                if body_error:
                    return error(400, body_error)
                if present:
                    return error(409, "Requested entity already exists", code=None)
                members.add(registration)
                self.created[(topic, registration)] = _now()
                return Response.json(200, self._resource(registration, topic))
            if not present and not (operation == "remove" and query.get("allowMissing", "").lower() == "true"):
                return error(404, "Topic subscription not found.")
            if operation == "get":
                return Response.json(200, self._resource(registration, topic))
            members.discard(registration)
            self.created.pop((topic, registration), None)
            return Response.json(200, {})

    def _list(self, registration: str, query: dict[str, str]) -> Response:
        try:
            size = min(int(query.get("pageSize") or 1000), 2000)
            start = int(query.get("pageToken", "o:0").removeprefix("o:")) if query.get("pageToken") else 0
        except ValueError:
            return error(400, "Invalid pageSize or pageToken.")
        if size < 1 or start < 0:
            return error(400, "Invalid pageSize or pageToken.")
        with self.state.lock:
            topics = sorted(t for t, members in self.state.topics.items() if registration in members)
            page = [self._resource(registration, t) for t in topics[start : start + size]]
        body: dict[str, Any] = {"topic_subscriptions": page}
        if start + size < len(topics):
            body["next_page_token"] = f"o:{start + size}"
        return Response.json(200, body)

    def _resource(self, registration: str, topic: str) -> dict[str, str]:
        return {
            "name": f"projects/{self.project_id}/registrations/{registration}/topicSubscriptions/{topic}",
            "topic_name": topic,
            "create_time": self.created.get((topic, registration), _now()),
        }


def _operation(method: str, named: bool) -> str:
    """The call a method and path shape stand for ("" when the API has none)."""
    return {("POST", False): "add", ("DELETE", True): "remove", ("GET", True): "get", ("GET", False): "list"}.get(
        (method, named), ""
    )


def _body_error(request: Request) -> str:
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return "Invalid JSON payload received."
    if not isinstance(body, dict):
        return "Invalid JSON payload received: expected a TopicSubscription object."
    unknown = sorted(set(body) - _BODY_FIELDS)
    return f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.' if unknown else ""


def _now() -> str:
    return datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

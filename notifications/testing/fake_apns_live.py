"""Live Activities in the APNs fake: payload checks, broadcast sends and the channel management API.

Served by `FakeAPNs` on its one HTTP/2 server (point the backend's `manage_host` at `fake.host_port`):

- A `liveactivity` push to a device path needs `apns-topic` = `<topic>.push-type.liveactivity`, priority
  5 or 10, and an `aps` of: `timestamp` (whole seconds), `event` (start, update, end), `content-state` (an
  object); optional `stale-date` (whole seconds), `relevance-score` (a number of at least 0), `alert`;
  `dismissal-date` only on end; a start also needs `alert`, `attributes-type` (a string) and `attributes`
  (an object), and may carry `input-push-token` (1) or `input-push-channel` (an existing channel), which no
  other event may. Any other push type must not use the Live Activity topic. Refusals: `TopicDisallowed`,
  `BadPriority`, `BadPayload`, each detail kept in `fake.live_refusals`.
- `POST /4/broadcasts/apps/<topic>`: `apns-channel-id` (MissingChannelId, BadChannelId,
  ChannelNotRegistered), `apns-push-type` liveactivity (MissingPushType, InvalidPushType), `apns-priority`
  1, 5 or 10 (BadPriority), `apns-expiration` whole seconds and 0 on a No Message Stored channel
  (BadExpirationDate), no `apns-topic` suffix (TopicDisallowed), at most 5,120 bytes (PayloadTooLarge),
  JSON (BadRequestPayload) with the Live Activity `aps` of an update or an end (BadRequestParams: a
  broadcast cannot start an activity). 200 with `apns-request-id` and `apns-unique-id`.
- `/1/apps/<topic>/channels`: POST `{"message-storage-policy": 0 or 1, "push-type": "LiveActivity"}`
  (BadRequestParams, BadRequestPayload; CannotCreateChannelConfig past `max_channels`) answers 201 with
  `apns-channel-id`; GET and DELETE with `apns-channel-id` read (200) and delete (204) one;
  `GET /1/apps/<topic>/all-channels` lists them. Another bundle id is TopicMismatch (403).
"""

import base64
import json
import re
import secrets
import threading
import uuid
from typing import Any

from notifications.testing.asgi_fake import Request, Response
from notifications.testing.fake_state import Delivery, FakeState

BROADCAST = re.compile(r"^/4/broadcasts/apps/([^/]+)$")
MANAGE = re.compile(r"^/1/apps/([^/]+)/(channels|all-channels)$")
CHANNEL = re.compile(r"[A-Za-z0-9+/]{1,500}={0,2}")
LIVE_SUFFIX = ".push-type.liveactivity"
BROADCAST_MAX = 5120
START_ONLY = ("attributes-type", "attributes", "input-push-token", "input-push-channel")


def reason(name: str, status: int, **more: Any) -> Response:
    return Response.json(status, {"reason": name, **more})


class FakeLiveActivities:
    """Channels, broadcasts and the Live Activity payload rules of one fake APNs (`topic` = the bundle id)."""

    def __init__(self, *, topic: str, state: FakeState, max_channels: int = 10_000) -> None:
        self.topic = topic
        self.state = state
        self.max_channels = max_channels
        self.lock = threading.Lock()
        self.channels: dict[str, int] = {}  # channel id -> message storage policy
        self.live_refusals: list[str] = []

    def reset(self) -> None:
        with self.lock:
            self.channels.clear()
            self.live_refusals.clear()

    # --- the payload of a Live Activity push -------------------------------------------------------------

    def device_problem(self, headers: dict[str, str], aps: dict[str, Any]) -> str:
        """The reason APNs refuses a push to a device path on Live Activity grounds ("" when it does not)."""
        live_type = headers.get("apns-push-type") == "liveactivity"
        topic = headers.get("apns-topic", "")
        if live_type != topic.endswith(LIVE_SUFFIX) or topic.removesuffix(LIVE_SUFFIX) != self.topic:
            return self._refused(
                "TopicDisallowed", f"apns-topic {topic!r} for push type {headers.get('apns-push-type')}"
            )
        if not live_type:
            return ""
        if headers.get("apns-priority", "10") not in ("5", "10"):
            return self._refused("BadPriority", "a Live Activity push goes at priority 5 or 10")
        problem = self.aps_problem(aps, broadcast=False)
        return self._refused("BadPayload", problem) if problem else ""

    def aps_problem(self, aps: dict[str, Any], *, broadcast: bool) -> str:
        """What is wrong with a Live Activity `aps` ("" when nothing is), as ActivityKit documents it."""
        event = aps.get("event")
        if event not in ("start", "update", "end") or (broadcast and event == "start"):
            return f"event {event!r} (a broadcast takes update or end; a token start, update or end)"
        if not _seconds(aps.get("timestamp")):
            return "timestamp must be whole Unix seconds"
        if not isinstance(aps.get("content-state"), dict):
            return "content-state must be an object"
        return self._dates_problem(aps) or self._event_problem(event, aps)

    def _dates_problem(self, aps: dict[str, Any]) -> str:
        for key in ("stale-date", "dismissal-date"):
            if key in aps and not _seconds(aps[key]):
                return f"{key} must be whole Unix seconds"
        score = aps.get("relevance-score", 0)
        if isinstance(score, bool) or not isinstance(score, int | float) or score < 0:
            return "relevance-score must be a number of at least 0"
        return ""

    def _event_problem(self, event: str, aps: dict[str, Any]) -> str:
        if event != "end" and "dismissal-date" in aps:
            return "dismissal-date goes with event end"
        if event != "start":
            extra = [key for key in START_ONLY if key in aps]
            return f"{extra[0]} goes with event start" if extra else ""
        if not isinstance(aps.get("alert"), dict):
            return "a start must carry an alert"
        if not isinstance(aps.get("attributes-type"), str) or not isinstance(aps.get("attributes"), dict):
            return "a start needs attributes-type (a string) and attributes (an object)"
        if aps.get("input-push-token", 1) != 1:
            return "input-push-token must be 1"
        with self.lock:
            known = aps.get("input-push-channel") is None or aps["input-push-channel"] in self.channels
        return "" if known else "input-push-channel names no channel"

    def _refused(self, name: str, detail: str) -> str:
        with self.lock:
            self.live_refusals.append(f"{name}: {detail}")
        return name

    # --- broadcasts -----------------------------------------------------------------------------------

    def broadcast(self, request: Request, bundle: str) -> Response:
        """One send on a channel, checked as APNs checks it."""
        if request.method != "POST":
            return reason("MethodNotAllowed", 405)
        if refused := self._broadcast_headers(request.headers, bundle):
            return refused
        if len(request.body) > BROADCAST_MAX:
            return reason("PayloadTooLarge", 413)
        try:
            payload = json.loads(request.body)
        except (ValueError, UnicodeDecodeError):
            return reason("BadRequestPayload", 400)
        aps = payload.get("aps") if isinstance(payload, dict) else None
        problem = self.aps_problem(aps, broadcast=True) if isinstance(aps, dict) else "no aps dictionary"
        if problem:
            self._refused("BadRequestParams", problem)
            return reason("BadRequestParams", 400)
        channel = request.headers["apns-channel-id"]
        self.state.deliver(Delivery(token=f"channel:{channel}", collapse="", message=payload,
                                    headers=dict(request.headers)))  # fmt: skip
        request_id = request.headers.get("apns-request-id") or str(uuid.uuid4())
        return Response(200, b"", {"apns-request-id": request_id, "apns-unique-id": str(uuid.uuid4())})

    def _broadcast_headers(self, headers: dict[str, str], bundle: str) -> Response | None:
        if bundle != self.topic:
            return reason("TopicMismatch", 403)
        if "apns-topic" in headers and headers["apns-topic"] != self.topic:
            return reason("TopicDisallowed", 400)
        channel = headers.get("apns-channel-id")
        if not channel:
            return reason("MissingChannelId", 400)
        if not CHANNEL.fullmatch(channel):
            return reason("BadChannelId", 400)
        with self.lock:
            policy = self.channels.get(channel)
        if policy is None:
            return reason("ChannelNotRegistered", 400)
        if "apns-push-type" not in headers:
            return reason("MissingPushType", 400)
        if headers["apns-push-type"].lower() != "liveactivity":
            return reason("InvalidPushType", 400)
        if headers.get("apns-priority", "10") not in ("1", "5", "10"):
            return reason("BadPriority", 400)
        expiration = headers.get("apns-expiration", "")
        if not re.fullmatch(r"\d{1,12}", expiration) or (policy == 0 and expiration != "0"):
            return reason("BadExpirationDate", 400)
        return None

    # --- channel management ------------------------------------------------------------------------------

    def manage(self, request: Request, bundle: str, resource: str) -> Response:
        """The channel management API: create, read, delete one channel; list all."""
        if bundle != self.topic:
            return reason("TopicMismatch", 403)
        if resource == "all-channels":
            if request.method != "GET":
                return reason("MethodNotAllowed", 405)
            with self.lock:
                return Response.json(200, {"channels": list(self.channels)}, _request_id(request))
        if request.method == "POST":
            return self._create(request)
        if request.method not in ("GET", "DELETE"):
            return reason("MethodNotAllowed", 405)
        channel = request.headers.get("apns-channel-id")
        if not channel:
            return reason("MissingChannelId", 400)
        with self.lock:
            policy = self.channels.get(channel)
            if policy is not None and request.method == "DELETE":
                del self.channels[channel]
        if policy is None:
            return reason("ChannelNotRegistered", 400) if CHANNEL.fullmatch(channel) else reason("BadChannelId", 400)
        if request.method == "DELETE":
            return Response(204, b"", _request_id(request))
        return Response.json(200, {"message-storage-policy": policy, "push-type": "LiveActivity"}, _request_id(request))

    def _create(self, request: Request) -> Response:
        try:
            body = json.loads(request.body)
        except (ValueError, UnicodeDecodeError):
            return reason("BadRequestPayload", 400)
        if (
            not isinstance(body, dict)
            or set(body) != {"message-storage-policy", "push-type"}
            or body["message-storage-policy"] not in (0, 1)
            or isinstance(body["message-storage-policy"], bool)
            or body["push-type"] != "LiveActivity"
        ):
            return reason("BadRequestParams", 400)
        with self.lock:
            if len(self.channels) >= self.max_channels:
                return reason("CannotCreateChannelConfig", 400)
            channel = base64.b64encode(secrets.token_bytes(16)).decode()
            self.channels[channel] = body["message-storage-policy"]
        return Response(201, b"", {**_request_id(request), "apns-channel-id": channel})


def _seconds(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _request_id(request: Request) -> dict[str, str]:
    return {"apns-request-id": request.headers.get("apns-request-id") or str(uuid.uuid4())}

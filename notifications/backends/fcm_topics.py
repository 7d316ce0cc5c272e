"""FCM topic subscriptions on the HTTP v1 topic-subscription API, one registration per call.

    client = topic_client("fcm", timeout=10.0)       # v1 by default; OPTIONS["topic_api"] = "iid" keeps IID
    codes = client.apply("news", {token: True, other: False})   # subscribe token, unsubscribe other
    topics = client.topics(token)                     # the registration's topics, as FCM lists them

The v1 API names one registration (an FCM registration token, or a Firebase installation ID) and one
topic per call, under the same OAuth2 access token and base URL as sends:

- subscribe: `POST /v1/projects/{project}/registrations/{registration}/topicSubscriptions?topic_name={topic}`
  with a `TopicSubscription` body (`{}`); `ALREADY_EXISTS` (409) means it was already done;
- unsubscribe: `DELETE .../topicSubscriptions/{topic}?allowMissing=true` (a subscription that is not there
  is not an error; a `NOT_FOUND` that is not about the registration means the same);
- list: `GET .../topicSubscriptions?pageSize=...&pageToken=...`, the names in `topic_subscriptions`.

One code per registration, as `notifications.backends.iid` gives for a batch: "" when applied,
`NOT_FOUND` when FCM does not know the registration (its error says `UNREGISTERED` or names the
registration), `INVALID_ARGUMENT` when FCM calls the registration malformed. What stands for the whole
job raises, as for IID: `IIDTemporary` (429, 5xx, no answer: safe to try again, each call is
idempotent) or `IIDRefused` (our credentials, the project, a redirect, anything else).

No database here: the job (`notifications.topics`) reads and fences the wishes.
"""

import json
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import httpx

from notifications.backends.credentials import (
    tls_context,
)
from notifications.backends.fcm import FID_PREFIX
from notifications.backends.iid import (
    IID_URL,
    IIDRefused,
    IIDTemporary,
    InstanceIdClient,
    exchange,
    fcm_topic_access,
    topic_name,
    with_access_token,
)
from weave.edge import HttpClass, http_class, outside_text, parse_retry_after

FCM_URL = "https://fcm.googleapis.com"
PAGE_SIZE = 1000
# What becomes of a call that got no answer: it may have been applied, and sending the wish again is safe.
_UNANSWERED = "the call may have been applied, and the latest wish is sent again (each call is idempotent)."
MAX_PAGES = 50  # 50,000 topics: far past what one app instance subscribes to


class TopicApi(Protocol):
    """What the topic job needs of a topic API: apply wishes, one code per registration."""

    def apply(self, topic: str, wishes: Mapping[str, bool]) -> dict[str, str]: ...


class TokenSource(Protocol):
    def get(self, *, refused: str | None = None) -> str: ...


def registration_id(stored: str) -> str:
    """The registration id FCM takes (a token, or a bare installation ID) for a device's stored token."""
    return stored.removeprefix(FID_PREFIX)


def topic_api_name(options: Mapping[str, Any]) -> str:
    """Which topic API an FCM backend's OPTIONS select: "v1" (the default) or "iid" (the legacy batch API)."""
    return str(options.get("topic_api") or "v1")


def topic_client(alias: str, *, timeout: float, api: str | None = None) -> Any:
    """A topic client for FCM backend `alias`: its credentials, trust, URL and topic API (`api`, else its OPTIONS')."""
    options, credentials = fcm_topic_access(alias, timeout=timeout)
    ca_file = options.get("ca_file")
    verify = tls_context(ca_file)
    if (api or topic_api_name(options)) == "iid":
        iid = InstanceIdClient(
            credentials=credentials, base_url=options.get("iid_url") or IID_URL, verify=verify, timeout=timeout
        )
        return LegacyTopicClient(iid)
    return V1TopicClient(
        credentials=credentials,
        project_id=str(options["project_id"]),
        base_url=options.get("base_url") or FCM_URL,
        verify=verify,
        timeout=timeout,
    )


class LegacyTopicClient:
    """The Instance ID batch API behind the same `apply()`: one batchAdd and one batchRemove at most."""

    def __init__(self, iid: InstanceIdClient) -> None:
        self.iid = iid

    def apply(self, topic: str, wishes: Mapping[str, bool]) -> dict[str, str]:
        codes: dict[str, str] = {}
        for action, wanted in (("subscribe", True), ("unsubscribe", False)):
            batch = [stored for stored, wish in wishes.items() if wish is wanted]
            if batch:
                answers = self.iid.batch(action, topic, [registration_id(stored) for stored in batch])
                codes.update(zip(batch, answers, strict=True))
        return codes


class V1TopicClient:
    """Blocking calls to the v1 topic-subscription API; one connection serves a job's calls."""

    def __init__(
        self,
        *,
        credentials: TokenSource,
        project_id: str,
        base_url: str = FCM_URL,
        verify: Any = True,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.credentials = credentials
        self.root = f"{base_url.rstrip('/')}/v1/projects/{quote(project_id, safe='')}/registrations"
        self.verify = verify
        self.timeout = timeout
        self.transport = transport

    def apply(self, topic: str, wishes: Mapping[str, bool]) -> dict[str, str]:
        """Subscribe (True) or unsubscribe (False) each registration; one code per registration, in order."""
        name = topic_name(topic)
        with self._client() as client:
            return {stored: self._one(client, name, stored, wish) for stored, wish in wishes.items()}

    def topics(self, registration: str) -> list[str]:
        """The topics FCM lists for `registration` (a device's stored token), sorted; raises as `apply` does."""
        url = f"{self.root}/{_segment(registration_id(registration))}/topicSubscriptions"
        found: list[str] = []
        page = ""
        with self._client() as client:
            for _ in range(MAX_PAGES):
                query = {"pageSize": str(PAGE_SIZE), **({"pageToken": page} if page else {})}
                status, headers, body, token = self._call(client, "GET", f"{url}?{urlencode(query)}")
                if http_class(status) != HttpClass.SUCCESS:
                    code = _whole_or_code(status, headers, body, token, what="list the topics")
                    raise IIDRefused(f"FCM answered {code} for this registration: it is not (or no longer) known.")
                names, page = _page(body)
                found += names
                if not page:
                    return sorted(set(found))
        raise IIDTemporary(f"FCM listed more than {MAX_PAGES} pages of topics; not an answer we can use.")

    def _one(self, client: httpx.Client, topic: str, stored: str, wish: bool) -> str:
        base = f"{self.root}/{_segment(registration_id(stored))}/topicSubscriptions"
        if wish:
            url = f"{base}?{urlencode({'topic_name': topic})}"
            status, headers, body, token = self._call(client, "POST", url, content=b"{}")
            if status == 409:  # ALREADY_EXISTS: the wish holds
                return ""
        else:
            url = f"{base}/{_segment(topic)}?allowMissing=true"
            status, headers, body, token = self._call(client, "DELETE", url)
        if http_class(status) == HttpClass.SUCCESS:
            return ""
        return _whole_or_code(status, headers, body, token, what="subscribe" if wish else "unsubscribe")

    def _client(self) -> httpx.Client:
        return httpx.Client(verify=self.verify, timeout=self.timeout, follow_redirects=False, transport=self.transport)

    def _call(
        self, client: httpx.Client, method: str, url: str, *, content: bytes | None = None
    ) -> tuple[int, httpx.Headers, bytes, str]:
        return with_access_token(
            self.credentials,
            lambda token: exchange(
                client, method, url, token, content, self.timeout, what="an FCM", unanswered=_UNANSWERED
            ),
        )


def _segment(value: str) -> str:
    return quote(value, safe=":~")


def _page(body: bytes) -> tuple[list[str], str]:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise IIDTemporary("FCM answered the topic list with a body that is not JSON.") from None
    if not isinstance(value, dict):
        raise IIDTemporary("FCM answered the topic list with a body that is not a JSON object.")
    items = value.get("topic_subscriptions", value.get("topicSubscriptions")) or []
    names = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            name = item.get("topic_name") or item.get("topicName") or str(item.get("name", "")).rsplit("/", 1)[-1]
            if isinstance(name, str) and name:
                names.append(outside_text(name, limit=900))
    page = value.get("next_page_token", value.get("nextPageToken")) or ""
    return names, page if isinstance(page, str) else ""


def _error(body: bytes) -> tuple[str, str, str]:
    """(FcmError errorCode, google.rpc status, message) of an error answer; empty strings when absent."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return "", "", ""
    if not isinstance(error, dict):
        return "", "", ""
    code = ""
    for detail in error.get("details") or []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("FcmError"):
            code = str(detail.get("errorCode", ""))
    return code, str(error.get("status", "")), str(error.get("message", ""))


def _dead_registration(status: int, code: str, rpc: str, message: str) -> str:
    """The per-registration code when FCM refused the registration itself ("" when it refused something else)."""
    if status == 404 and (code == "UNREGISTERED" or "registration" in message.lower()):
        return "NOT_FOUND"
    if status == 400 and "INVALID_ARGUMENT" in (code, rpc) and "topic" not in message.lower():
        return "INVALID_ARGUMENT"
    return ""


def _whole_or_code(status: int, headers: Mapping[str, str], body: bytes, token: str, *, what: str) -> str:
    """The per-registration code of a refusal, or raise what the answer says about the whole job."""
    code, rpc, message = _error(body)
    if dead := _dead_registration(status, code, rpc, message):
        return dead
    if what == "unsubscribe" and status == 404 and rpc == "NOT_FOUND":
        return ""  # FCM's own word that no such subscription exists: the wish to be out of the topic holds
    said = outside_text(message or body.strip(), secrets=[token], limit=300) or "an empty body"
    kind = http_class(status)
    if kind in (HttpClass.THROTTLED, HttpClass.SERVER, HttpClass.TIMEOUT):
        retry_after = parse_retry_after(headers.get("retry-after"), headers.get("date"))
        asked = f"Retry-After {retry_after:g} s" if retry_after is not None else "no Retry-After"
        raise IIDTemporary(f"FCM answered HTTP {status} ({asked}) to {what}: {said}", retry_after=retry_after)
    if kind == HttpClass.AUTH:
        who = "refused our access token" if status == 401 else "refused the service account for this project"
        raise IIDRefused(f"FCM {who} (HTTP {status}) to {what}: {said}")
    raise IIDRefused(f"FCM refused to {what} (HTTP {status}, {code or rpc or 'no error code'}): {said}")

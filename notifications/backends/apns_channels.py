"""APNs broadcast channels for Live Activities (iOS 18): create, read, list and delete, on Apple's management API.

    client = ChannelClient.for_backend("apns", timeout=10.0)
    channel = client.create(stored=False)   # "No Message Stored": the higher publishing budget, for scores
    client.channels()                        # every channel id of the app (bundle id = the backend's topic)
    client.delete(channel)

The management API lives on its own host (`api-manage-broadcast.push.apple.com:2196`, and
`api-manage-broadcast.sandbox.push.apple.com:2195` for a sandbox `host`; `OPTIONS["manage_host"]`
points elsewhere), speaks HTTP/2 only, and takes the backend's provider token:

- create: `POST /1/apps/{bundle}/channels` with `{"message-storage-policy": 0 or 1, "push-type": "LiveActivity"}`,
  201 and the new id in the `apns-channel-id` header;
- read: `GET /1/apps/{bundle}/channels` with the `apns-channel-id` header, 200 and the channel's config;
- list: `GET /1/apps/{bundle}/all-channels`, 200 and `{"channels": [...]}`;
- delete: `DELETE /1/apps/{bundle}/channels` with the `apns-channel-id` header, 204.

Sends to a channel go through the worker like any notification (`channel:<id>` on the APNs backend).
A refusal raises `ChannelError` with Apple's reason; `temporary` says whether asking again later may help.
"""

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from notifications.backends.credentials import APNsProviderToken, tls_context
from notifications.live_content import CHANNEL_ID
from weave.edge import HttpClass, http_class, outside_text

BODY_CAP = 1024 * 1024  # 10,000 channel ids of some 30 characters are about 400 KiB
AUTH_REASONS = {"ExpiredProviderToken", "InvalidProviderToken"}


class ChannelError(Exception):
    """APNs refused a channel request, or gave no usable answer."""

    def __init__(self, detail: str, *, reason: str = "", temporary: bool = False) -> None:
        super().__init__(detail)
        self.reason = reason
        self.temporary = temporary


def manage_host(options: Mapping[str, Any]) -> str:
    """The channel-management host[:port] for an APNs backend's OPTIONS."""
    if options.get("manage_host"):
        return str(options["manage_host"])
    sandbox = "sandbox" in str(options.get("host") or "")
    return "api-manage-broadcast.sandbox.push.apple.com:2195" if sandbox else "api-manage-broadcast.push.apple.com:2196"


class ChannelClient:
    """Blocking calls to the management API of one app (bundle id), with the backend's provider token."""

    def __init__(
        self, *, bundle: str, host: str, provider_token: APNsProviderToken, verify: Any = True, timeout: float = 10.0
    ) -> None:
        self.bundle = bundle
        self.root = f"https://{host}/1/apps/{bundle}"
        self.provider_token = provider_token
        self.verify = verify
        self.timeout = timeout

    @classmethod
    def for_backend(cls, alias: str, *, timeout: float) -> "ChannelClient":
        """The client of APNs backend `alias` (its topic is the bundle id); ChannelError if it is not APNs."""
        from notifications.backends import backend_configs
        from notifications.backends.apns import APNsBackend, _provider_token
        from notifications.backends.registry import backend_class

        config = backend_configs().get(alias)
        if config is None or not issubclass(backend_class(config["BACKEND"]), APNsBackend):
            raise ChannelError(f"Backend {alias!r} is not an APNs backend in WEAVE PUSH_BACKENDS.")
        options = config.get("OPTIONS") or {}
        return cls(
            bundle=str(options["topic"]), host=manage_host(options), provider_token=_provider_token(options),
            verify=tls_context(options.get("ca_file")), timeout=timeout,
        )  # fmt: skip

    def create(self, *, stored: bool = False) -> str:
        """Make a Live Activity channel; return its id. `stored`: APNs keeps the latest message for offline devices."""
        body = {"message-storage-policy": 1 if stored else 0, "push-type": "LiveActivity"}
        status, headers, _ = self._call("POST", "/channels", content=json.dumps(body).encode())
        channel = str(headers.get("apns-channel-id", ""))
        if status != 201 or not CHANNEL_ID.fullmatch(channel):
            raise ChannelError(
                f"APNs answered HTTP {status} to a channel creation without a channel id.", temporary=True
            )
        return channel

    def read(self, channel: str) -> dict[str, Any]:
        """The channel's configuration: {"message-storage-policy": 0 or 1, "push-type": "LiveActivity"}."""
        _, _, body = self._call("GET", "/channels", channel=channel)
        config = _json(body)
        if not isinstance(config, dict):
            raise ChannelError("APNs answered a channel read with a body that is not a JSON object.", temporary=True)
        return {key: config[key] for key in ("message-storage-policy", "push-type") if key in config}

    def channels(self) -> list[str]:
        """Every channel id of the app, as APNs lists them."""
        _, _, body = self._call("GET", "/all-channels")
        listed = _json(body)
        ids = listed.get("channels") if isinstance(listed, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) and CHANNEL_ID.fullmatch(i) for i in ids):
            raise ChannelError("APNs answered the channel list without a list of channel ids.", temporary=True)
        return list(ids)

    def delete(self, channel: str) -> None:
        """Delete the channel (irreversible: its id is never made again)."""
        self._call("DELETE", "/channels", channel=channel)

    def _call(
        self, method: str, path: str, *, channel: str | None = None, content: bytes | None = None
    ) -> tuple[int, httpx.Headers, bytes]:
        headers = {"content-type": "application/json"} if content is not None else {}
        if channel is not None:
            if not isinstance(channel, str) or not CHANNEL_ID.fullmatch(channel):
                raise ChannelError("A channel id is base64 text, as APNs gave it.")
            headers["apns-channel-id"] = channel
        refused: str | None = None
        for attempt in (1, 2):
            token = self.provider_token.get(refused=refused)
            status, answer, body = self._exchange(
                method, path, {**headers, "authorization": f"bearer {token}"}, content
            )
            reason = _reason(body)
            if status == 403 and reason in AUTH_REASONS and attempt == 1:
                refused = token  # nothing was done: sign a new provider token once and ask again
                continue
            if http_class(status) != HttpClass.SUCCESS:
                raise _refusal(status, reason, body, secrets=[token])
            return status, answer, body
        raise AssertionError("unreachable")  # pragma: no cover

    def _exchange(
        self, method: str, path: str, headers: dict[str, str], content: bytes | None
    ) -> tuple[int, httpx.Headers, bytes]:
        deadline = time.monotonic() + self.timeout
        try:
            with (
                httpx.Client(http2=True, verify=self.verify, timeout=self.timeout, follow_redirects=False) as client,
                client.stream(method, f"{self.root}{path}", headers=headers, content=content) as response,
            ):
                body = b""
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > BODY_CAP or time.monotonic() > deadline:
                        raise ChannelError("APNs's answer was too long or too slow.", temporary=True)
                return response.status_code, response.headers, body
        except httpx.ConnectError as exc:
            raise ChannelError(f"{self.root} is unreachable ({type(exc).__name__}).", temporary=True) from None
        except httpx.HTTPError as exc:
            raise ChannelError(f"{self.root} gave no answer ({type(exc).__name__}).", temporary=True) from None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _reason(body: bytes) -> str:
    value = _json(body)
    return outside_text(str(value.get("reason", "")), limit=80) if isinstance(value, dict) else ""


def _refusal(status: int, reason: str, body: bytes, *, secrets: list[str]) -> ChannelError:
    said = reason or outside_text(body, secrets=secrets, limit=200) or "no reason"
    temporary = http_class(status) in (HttpClass.THROTTLED, HttpClass.SERVER, HttpClass.TIMEOUT)
    hint = {
        "ChannelNotRegistered": " (the channel does not exist, or was made in the other environment)",
        "CannotCreateChannelConfig": " (the app has 10,000 channels: delete the ones no longer used)",
        "FeatureNotEnabled": " (enable the Broadcast capability of the App ID on developer.apple.com)",
    }.get(reason, "")
    return ChannelError(f"APNs refused the channel request: {said} (HTTP {status}){hint}.", reason=reason,
                        temporary=temporary)  # fmt: skip

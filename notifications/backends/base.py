"""The push backend interface: one message in, one classified result out. No database access here.

A backend speaks one provider's protocol (the generic webhook, FCM, APNs, Web Push). The worker runs
every backend on its own event loop, many sends in flight at once, and only ever awaits `send()`:
whatever the network or the peer does, `send()` returns a `SendResult` and never raises for
transport errors, HTTP errors or garbage answers. Every request goes through `capped_request()`
(in `notifications.backends.http`), so one deadline bounds the whole exchange and a body is never
read past a small cap.
"""

import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from weave.edge import SNIPPET, outside_text

if TYPE_CHECKING:
    from notifications.backends.http import CappedResponse

_VISIBLE_ASCII = re.compile(r"[!-~]{1,2048}")


class TokenError(ValueError):
    """A device token that this backend can never send to (its message says why)."""


class Outcome(StrEnum):
    """How one send ended, from the provider's side (mirrors DeliveryAttempt.Outcome)."""

    DELIVERED = "delivered"
    TEMPORARY = "temporary"  # nothing delivered; try again later
    PERMANENT = "permanent"  # the provider will never accept this message
    UNKNOWN = "unknown"  # sent, but no answer: the provider may have delivered it


class Priority(StrEnum):
    NORMAL = "normal"
    HIGH = "high"


@dataclass(frozen=True)
class PushMessage:
    """What goes to the provider for one notification. Built by the worker from the claimed row."""

    idempotency_key: str
    token: str  # the device token (or Web Push subscription, as the backend defines it)
    title: str
    body: str
    data: Mapping[str, Any] = field(default_factory=dict)
    # Checked display options (`notifications.content`), mapped by each backend to its wire format.
    options: Mapping[str, Any] = field(default_factory=dict)
    # Same key => the device replaces the earlier message instead of stacking it (APNs collapse-id,
    # FCM collapse_key/tag, Web Push Topic). Empty: the backend may fall back to the idempotency key.
    collapse_key: str = ""
    priority: str = Priority.NORMAL
    # After this instant the message must not be shown any more. The backend computes the remaining
    # TTL at send time (`options.ttl_to_send()`), so a message that waited in the queue gets a shorter one.
    expires_at: datetime | None = None
    backend: str = "default"  # the alias in WEAVE["PUSH_BACKENDS"] that sends it


@dataclass(frozen=True)
class SendResult:
    """A classified provider answer. `reason` is for a person reading the admin: always sanitized."""

    outcome: Outcome
    reason: str = ""
    http_status: int | None = None
    latency_ms: int = 0
    provider_message_id: str = ""
    # Seconds the provider asked us to wait (Retry-After on 429/503); None means "use our backoff".
    retry_after: float | None = None
    # The provider is failing for everyone (bad credentials, 5xx, unreachable, a redirect), not for this
    # message: the circuit breaker counts these.
    systemic: bool = False
    # No point sending anything else in this batch (credentials refused, a misconfigured URL): the
    # breaker opens at once.
    fatal: bool = False
    # The provider says this device token is dead (unregistered, wrong topic, 410): the device must be
    # deactivated in the same transaction as the attempt's guarded finish. Concerns one token only.
    token_invalid: bool = False
    # Whether any part of the request may have reached the provider: some request bytes written on
    # HTTP/1.1, a HEADERS frame out on a stream the peer neither refused nor left above a GOAWAY's
    # last stream id on HTTP/2. False only when the backend knows nothing left (waiting for a pool
    # slot or a stream, connecting, TLS, fetching credentials, refused before processing), so a retry
    # cannot duplicate anything. The default is the cautious answer: every result built from a
    # provider's answer was sent.
    sent: bool = True
    # The one event behind this failure when it failed other requests too (an HTTP/2 connection lost
    # or sent away with many streams open, one connect attempt they all waited for): the circuit
    # breaker counts such answers as one failure, as they are one piece of evidence. "" for its own.
    incident: str = ""

    def __post_init__(self) -> None:
        if self.token_invalid and (self.systemic or self.fatal):
            raise ValueError("A token-level refusal concerns one device: it is never systemic or fatal.")
        if self.token_invalid and self.outcome != Outcome.PERMANENT:
            raise ValueError("A dead device token is a permanent outcome.")
        if not self.sent and self.outcome in (Outcome.UNKNOWN, Outcome.DELIVERED):
            raise ValueError("Only a request that may have left can be delivered or of unknown outcome.")


class PushBackend(ABC):
    """Base class of every push backend, configured under an alias in WEAVE["PUSH_BACKENDS"].

    One instance lives on one worker's event loop for the length of a drain; the worker calls
    `aclose()` at the end. Subclasses implement `send()` and may override `check_options()`,
    `secrets()`, and the `supports_*` flags. A backend that authenticates with a credential it can
    renew sends through `send_refreshing_once()`.
    """

    # Whether the provider speaks HTTP/2 (one connection multiplexes a batch's concurrency).
    supports_http2: ClassVar[bool] = False
    # Whether a notification may go to a topic or a condition (`notification_send_to_topic`) instead of a device.
    supports_topics: ClassVar[bool] = False
    # Token prefixes that name a target a notification may go to but no device may be (an APNs channel).
    target_only_prefixes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, alias: str, options: Mapping[str, Any], timeout: float, concurrency: int) -> None:
        problems = self.check_options(alias, options)
        if problems:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(f"WEAVE PUSH_BACKENDS[{alias!r}]: " + "; ".join(problems))
        self.alias = alias
        self.options = dict(options)
        self.timeout = float(timeout)
        self.concurrency = max(1, int(concurrency))
        self._client: httpx.AsyncClient | None = None

    # --- what a backend implements -------------------------------------------------------------------

    @abstractmethod
    async def send(self, message: PushMessage) -> SendResult:
        """Send one message and classify the answer. Never raises for transport, HTTP or garbage answers."""

    @classmethod
    def check_options(cls, alias: str, options: Mapping[str, Any]) -> list[str]:
        """Return the problems with `options` (missing keys, unreadable files), each a readable sentence."""
        return []

    @classmethod
    def prepare(cls, options: Mapping[str, Any], *, timeout: float) -> None:
        """Make this process's shared credentials ready before the first drain needs them (a worker's warm-up).

        Called with options that passed `check_options`. Must not wait on the network: a fetch it starts
        runs in the background, and a failure is the first drain's to report. The default does nothing."""
        return None

    def breaker_scope(self, message: PushMessage) -> str:
        """Return the part of this backend a failure of `message` may stop, beyond the alias itself.

        "" means the whole alias (one provider, one set of credentials). A backend whose destinations
        are chosen by users (Web Push endpoints) returns the destination's origin, so a failing push
        service stops only the rows bound for it.
        """
        if type(self).hold_scope is not PushBackend.hold_scope:
            warnings.warn(
                f"{type(self).__name__}.hold_scope() is deprecated: override breaker_scope() instead.",
                DeprecationWarning,
                stacklevel=2,
            )
            return type(self).hold_scope(self, message)
        return ""

    def hold_scope(self, message: PushMessage) -> str:
        """Deprecated name of `breaker_scope()`."""
        return self.breaker_scope(message)

    @classmethod
    def canonical_token(cls, token: str) -> str:
        """Return `token` in the one form this backend stores and sends, or raise `TokenError` saying why
        it can never be sent. Called on text already checked for type, NUL and lone surrogates, stripped.

        The default: visible ASCII (no spaces or control characters), 1 to 2,048 characters."""
        if not _VISIBLE_ASCII.fullmatch(token):
            raise TokenError("A device token is 1 to 2048 visible ASCII characters (no spaces or control characters).")
        return token

    @classmethod
    def target_problem(cls, token: str, options: Mapping[str, Any]) -> str:
        """Why a message with checked `options` cannot go to the canonical `token` ("" when it can).

        A fan-out skips such a device with the reason; a single send refuses it. The default: none."""
        return ""

    @classmethod
    def token_aliases(cls, token: str) -> tuple[str, ...]:
        """Other canonical spellings of the device `token` names (the same install, said differently).

        A registration finds an existing device under any of them and stores the new spelling. Called on
        a token `canonical_token` returned. The default: none."""
        return ()

    def secrets(self) -> list[str]:
        """Return every secret value this backend holds (tokens, keys), so reasons and logs can redact them."""
        return []

    async def aclose(self) -> None:
        """Close the connections this backend opened."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # --- shared helpers --------------------------------------------------------------------------------

    async def send_refreshing_once(
        self,
        credential: Callable[[str | None], Awaitable["str | SendResult"]],
        exchange: Callable[[str], Awaitable["CappedResponse | SendResult"]],
        *,
        refuses: Callable[["CappedResponse"], bool],
        classify: Callable[["CappedResponse", str, bool], SendResult],
    ) -> SendResult:
        """Send with a credential; if the provider refuses that credential, get a new one once and send again.

        `credential(refused)` returns the credential to send with (`refused` is None at first, then the
        one the provider refused), or a `SendResult` when none can be had. `exchange(credential)` sends
        and returns the answer, or a `SendResult` for a failed exchange. `refuses(answer)` says whether
        the answer refuses the credential itself, which means nothing was delivered: only then is the
        message sent a second time. `classify(answer, credential, after_refresh)` judges the last answer.
        """
        refused: str | None = None
        for attempt in (1, 2):
            got = await credential(refused)
            if isinstance(got, SendResult):
                return got
            answer = await exchange(got)
            if isinstance(answer, SendResult):
                return answer
            if attempt == 1 and refuses(answer):
                refused = got
                continue
            return classify(answer, got, attempt == 2)
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def client(self) -> httpx.AsyncClient:
        """The backend's pooled client, made on first use (so on the event loop that sends)."""
        if self._client is None:
            self._client = self.make_client()
        return self._client

    def make_client(self, **extra: Any) -> httpx.AsyncClient:
        """Return a client sized for the worker's concurrency that never follows a redirect."""
        from notifications.backends.http import make_client

        return make_client(timeout=self.timeout, concurrency=self.concurrency, http2=self.supports_http2, **extra)

    def reason(self, text: str | bytes, *, limit: int = SNIPPET) -> str:
        """Return outside text (a body, a header, an exception) fit for a reason: decoded, redacted, one line."""
        return outside_text(text, secrets=self.secrets(), limit=limit)

"""The provider interface: one message in, one classified result out. No database access here."""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class Outcome(StrEnum):
    """How one send ended, from the provider's side (mirrors DeliveryAttempt.Outcome)."""

    DELIVERED = "delivered"
    TEMPORARY = "temporary"  # nothing delivered; try again later
    PERMANENT = "permanent"  # the provider will never accept this message
    UNKNOWN = "unknown"  # sent, but no answer: the provider may have delivered it


@dataclass(frozen=True)
class PushMessage:
    """What goes to the provider for one notification."""

    idempotency_key: str
    to: str
    title: str
    body: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SendResult:
    """A classified provider response. `reason` is written for a person reading the admin."""

    outcome: Outcome
    reason: str = ""
    http_status: int | None = None
    latency_ms: int = 0
    provider_message_id: str = ""
    # Seconds the provider asked us to wait (429 Retry-After); None means "use our backoff".
    retry_after: float | None = None
    # The provider is failing for everyone (bad credentials, 5xx, unreachable), not for this message:
    # the circuit breaker counts these.
    systemic: bool = False
    # Credentials were refused: no point sending anything else in this batch.
    fatal: bool = False


class Provider(Protocol):
    """Send one push message and classify the answer. Must be safe to call from several threads."""

    def send(self, message: PushMessage) -> SendResult: ...

    def close(self) -> None: ...

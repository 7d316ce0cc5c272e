"""What an answer means for its notification: the transition and the backoff. No database here.

The worker asks `decide()` for every answer and writes what it returns behind the row's guard (the
circuit breakers live in `breaker`). Everything is a pure function of its inputs (the random source
included), so it is tested fast, with `httpx.MockTransport` answers and no database.
"""

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from notifications.backends import Outcome, SendResult
from weave.edge import outside_text

# One retry policy for every job type: push delivery's numbers come from its WEAVE settings.
from weave.jobs import RetryPolicy

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"


@dataclass(frozen=True)
class Transition:
    """The row's next state after one answer, and what the attempt's receipt says."""

    status: str  # pending (retried), delivered, failed
    number: int  # this attempt's number, 1-based
    event: str  # delivered, retry, unknown, failed
    last_error: str  # for the row: the answer and what happens next
    delay: float | None = None  # seconds until the row is due again (database clock), when retried
    exhausted: bool = False  # failed because it ran out of attempts: the row's text gets the whole story
    deactivate_device: bool = False  # the provider says the device token is dead


def decide(result: SendResult, *, attempts_before: int, policy: RetryPolicy, rng: random.Random) -> Transition:
    """Return the transition for one answer to a row that had `attempts_before` attempts."""
    number = attempts_before + 1
    if result.outcome == Outcome.DELIVERED:
        # A malformed 2xx body is noted on the row, though the message is delivered.
        return Transition(status=DELIVERED, number=number, event="delivered", last_error=result.reason)
    if result.outcome == Outcome.PERMANENT:
        return Transition(
            status=FAILED,
            number=number,
            event="failed",
            last_error=f"Failed permanently on attempt {number}: {result.reason}",
            deactivate_device=result.token_invalid,
        )
    if number >= policy.max_attempts:
        return Transition(
            status=FAILED,
            number=number,
            event="failed",
            last_error=f"Gave up after {number} attempts (PUSH_MAX_ATTEMPTS={policy.max_attempts}).",
            exhausted=True,
        )
    if result.retry_after is not None:
        delay = min(result.retry_after, policy.backoff_max)
        why = "as the provider asked"
    else:
        delay = policy.delay(number, rng=rng)
        why = "exponential backoff with jitter"
    return Transition(
        status=PENDING,
        number=number,
        event="retry" if result.outcome == Outcome.TEMPORARY else "unknown",
        last_error=f"{result.reason} Attempt {number} of {policy.max_attempts}; next try in {delay:.1f} s ({why}).",
        delay=delay,
    )


@dataclass(frozen=True)
class PastAttempt:
    """One earlier attempt, as stored (DeliveryAttempt.number, outcome, reason)."""

    number: int
    outcome: str
    reason: str


def story(head: str, earlier: Sequence[PastAttempt], last: SendResult, number: int) -> str:
    """The whole history of a row that ran out of attempts: one line per attempt, from stored fields."""
    lines = [f"{past.number}. {past.outcome}: {past.reason}" for past in earlier]
    lines.append(f"{number}. {last.outcome}: {last.reason}")
    if last.outcome == Outcome.UNKNOWN or any(past.outcome == Outcome.UNKNOWN for past in earlier):
        head += " At least one attempt got no answer, so the provider may have delivered it."
    return "\n".join([head, *lines])


def safe_result(result: SendResult, secrets: Sequence[str] = ()) -> SendResult:
    """Return `result` with its outside text made safe to store and log, whatever the backend did.

    Backends already sanitize; this is the worker's own line of defence, so a careless third-party
    backend cannot jam a row with a NUL byte or leak a token into the admin.
    """
    reason = outside_text(result.reason, secrets=secrets, limit=1000) if result.reason else ""
    message_id = (
        outside_text(result.provider_message_id, secrets=secrets, limit=200) if result.provider_message_id else ""
    )
    if reason == result.reason and message_id == result.provider_message_id:
        return result
    values: dict[str, Any] = {**asdict(result), "reason": reason, "provider_message_id": message_id}
    return SendResult(**values)

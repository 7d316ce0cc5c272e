"""How a job's failures end: permanent, or retried after a backoff. Pure policy, no database."""

import random
from dataclasses import dataclass

from weave.retry import backoff_seconds


class Fail(Exception):  # noqa: N818  (the name is what a handler says: raise Fail("card declined"))
    """Raised by a handler: the job failed for good (a business refusal); it is not retried."""


@dataclass(frozen=True)
class RetryPolicy:
    """`max_attempts` attempts in all; attempt n waits `backoff` * 2**(n-1) seconds (jittered, capped)."""

    max_attempts: int = 5
    backoff: float = 2.0
    backoff_max: float = 300.0

    def retry_in(self, attempt: int, error: BaseException) -> float | None:
        """Seconds until the next attempt after `attempt` failed with `error`; None: fail the job now."""
        if isinstance(error, Fail) or attempt >= self.max_attempts:
            return None
        return self.delay(attempt)

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """The jittered, capped backoff after attempt number `attempt` (1-based); `rng` for a seeded test."""
        return backoff_seconds(attempt, base=self.backoff, cap=self.backoff_max, rng=rng)

"""How a job's failures end: permanent, or retried after a backoff. Pure policy, no database."""

import random
from dataclasses import dataclass

from weave.retry import backoff_seconds


class Fail(Exception):  # noqa: N818  (the name is what a handler says: raise Fail("card declined"))
    """Raised by a handler: the job failed for good (a business refusal); it is not retried."""


class AttemptUnfinished(Exception):  # noqa: N818  (what befell the attempt, as the retry policy is told)
    """What `RetryPolicy.retry_in` is told of an attempt taken over without a finish: its worker stopped,
    crashed or stalled past its lease. It counts as a failed try."""


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

    def why_final(self, attempt: int, error: BaseException, *, what: str = "attempt") -> str:
        """Why `retry_in` gave up on `error` after `attempt`, as the end of the failure's reason.

        Empty for `Fail`, whose own words are the reason. `what` names what is counted (an undo counts its
        own tries). An operator reading "failed" should not have to guess whether the error was final or
        the attempts ran out.
        """
        if isinstance(error, Fail):
            return ""
        if attempt >= self.max_attempts:
            return f"Not retried: that was {what} {attempt} and the retry policy allows {self.max_attempts}."
        return "Not retried: the retry policy gives up on this error."

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """The jittered, capped backoff after attempt number `attempt` (1-based); `rng` for a seeded test."""
        return backoff_seconds(attempt, base=self.backoff, cap=self.backoff_max, rng=rng)

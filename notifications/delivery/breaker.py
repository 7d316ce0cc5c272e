"""Circuit breakers, one per scope: a failure holds back only the rows that would hit the same failure.

A scope is a backend alias, and for destinations a user chooses (Web Push endpoints) the alias plus
the endpoint's origin (`PushBackend.breaker_scope()`), so a stranger's push service stops only the rows
going to it. Per scope:

- *closed*: every row may start. Each answer goes into a window of the last `window` answers. A
  failure is a systemic answer (5xx, 429, unreachable, a redirect, refused credentials) or an
  `unknown` one (no answer: the peer may be hanging). It opens when the window holds at least
  `min_answers` answers and at least `ratio` of them are failures, when the last `run` answers all
  failed, or at once on a fatal answer (credentials, a redirect). The defaults are sized so that a
  provider failing one request in three stays closed (docs/breaker.md has the arithmetic, and
  tests/notifications/test_breaker_rule.py checks it), while one failing nine in ten opens within
  a few hundred answers at most. Answers complete in any order (a failure often comes back sooner than a
  delivery), so each row allowed to start takes a ticket, and answers enter the window in the order
  their rows started: the window is a fair sample of what was sent, not of what happened to answer
  first. An answer waits for the earlier ones only while fewer than `window` answers wait behind a
  gap; then the late one is skipped and counted when it comes, so one hung request cannot stall the
  judgment of the rest.
  Failures that share one incident (`SendResult.incident`: an HTTP/2 connection that went down with
  a hundred streams on it) count once: they are one event, and one dropped connection must not
  outweigh the answers around it and stop every row of the scope.
- *open*: rows of the scope are not started; they are handed back due when the pause ends, without
  using an attempt. The pause is the cooldown, or the provider's Retry-After when longer, capped by
  `cap` for a backend and by `origin_cap` for a user-chosen origin.
- *half-open*: once the pause is over, one row goes out as a probe. A good answer closes the scope
  (with a fresh window); a failure opens it again for another pause.

Pure: no database, no clock of its own (callers pass `now`, a monotonic reading).
"""

from collections import deque
from dataclasses import dataclass, field

from notifications.backends import Outcome, SendResult

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


@dataclass(frozen=True)
class BreakerRule:
    """The numbers every scope's breaker follows (WEAVE PUSH_BREAKER_* settings)."""

    window: int = 400
    min_answers: int = 200
    ratio: float = 0.5
    run: int = 20  # failures in a row (in start order) that open it whatever the volume; 0: never
    cooldown: float = 30.0
    cap: float = 3600.0  # longest pause a backend's own Retry-After may set
    origin_cap: float = 300.0  # longest pause a user-chosen origin may set


def is_failure(result: SendResult) -> bool:
    """Whether an answer says the scope is unhealthy (systemic, or no answer at all)."""
    return result.systemic or result.outcome == Outcome.UNKNOWN


@dataclass
class CircuitBreaker:
    """One scope's breaker."""

    rule: BreakerRule = field(default_factory=BreakerRule)
    user_chosen: bool = False  # an origin a user picked: its pauses are capped by `origin_cap`
    name: str = ""
    state: str = CLOSED
    reason: str = ""  # why it last opened
    open_until: float = 0.0  # monotonic time the current pause ends
    probing: bool = False  # a half-open probe is out
    answers: deque[bool] = field(default_factory=deque)  # True: a failure
    failures: int = 0  # how many of `answers` are failures
    streak: int = 0  # failures judged in a row since the last healthy answer
    incidents: deque[str] = field(default_factory=deque)  # incidents already counted (the last `window`)
    issued: int = 0  # tickets handed to rows allowed to start
    judged: int = 0  # the ticket whose answer enters the window next; earlier ones are in (or skipped)
    early: dict[int, SendResult] = field(default_factory=dict)  # answers waiting for an earlier ticket's
    skipped: set[int] = field(default_factory=set)  # tickets passed over while late: counted when they answer

    def allows(self, now: float) -> str:
        """Whether a row of this scope may start now: "go", "probe" (the one a half-open scope lets through) or ""."""
        if self.state == OPEN and now >= self.open_until:
            self.state = HALF_OPEN
        if self.state == CLOSED:
            return "go"
        if self.state == HALF_OPEN and not self.probing:
            self.probing = True
            return "probe"
        return ""

    def take_ticket(self) -> int:
        """The start-order number of a row `allows()` just let go ("go", not the probe)."""
        self.issued += 1
        return self.issued - 1

    def record(self, result: SendResult, now: float, *, probe: bool = False, ticket: int | None = None) -> bool:
        """Count one answer; return True when it opened the breaker.

        `probe`: the answer to the half-open probe. `ticket`: the row's `take_ticket()`, so the answer is
        judged in start order; without one it is judged as it comes."""
        if probe and self.state == HALF_OPEN:
            self.probing = False
            if not is_failure(result):
                self.state, self.reason = CLOSED, ""
                self._forget()
                return False
            return self._open(result, now, "its half-open probe failed")
        if self.state != CLOSED:
            return False  # answers to rows started before it opened: the pause already stands
        if result.fatal:
            return self._open(result, now, "")
        if ticket is None:
            return self._judge(result, now)
        if ticket < self.judged:
            if ticket not in self.skipped:
                return False  # a row started before the window was last reset: it describes that time
            self.skipped.discard(ticket)
            return self._judge(result, now)
        self.early[ticket] = result
        while True:
            if self.judged in self.early:
                if self._judge(self.early.pop(self.judged), now):
                    return True
                self.judged += 1
            elif len(self.early) >= self.rule.window:
                self.skipped.add(self.judged)  # late: judge what came after it rather than wait for it
                self.judged += 1
            else:
                return False

    def _judge(self, result: SendResult, now: float) -> bool:
        """Put one answer into the window, in its turn; True when the window now says open."""
        failed = is_failure(result)
        if failed and result.incident:
            if result.incident in self.incidents:
                return False  # the same event as a failure already counted
            self.incidents.append(result.incident)
            while len(self.incidents) > self.rule.window:
                self.incidents.popleft()
        self.answers.append(failed)
        self.failures += failed
        while len(self.answers) > self.rule.window:
            self.failures -= self.answers.popleft()
        self.streak = self.streak + 1 if failed else 0
        rule, failures, seen = self.rule, self.failures, len(self.answers)
        if seen >= rule.min_answers and failures >= rule.ratio * seen:
            return self._open(result, now, f"{failures} of its last {seen} answers failed")
        if rule.run and self.streak >= rule.run:
            return self._open(result, now, f"its last {self.streak} answers failed, one after another")
        return False

    def seconds_open(self, now: float) -> float:
        """How long from `now` rows of this scope are held back (0 when it is closed)."""
        return 0.0 if self.state == CLOSED else max(0.0, self.open_until - now)

    def _open(self, result: SendResult, now: float, why: str) -> bool:
        cap = self.rule.origin_cap if self.user_chosen else self.rule.cap
        pause = self.rule.cooldown
        if result.retry_after is not None:
            pause = max(pause, result.retry_after)
        pause = min(pause, cap)
        self.state, self.probing = OPEN, False
        self.open_until = now + pause
        self._forget()
        cause = f"{why} (last: {result.reason})" if why else result.reason
        self.reason = f"Circuit breaker opened for {self.name or 'this scope'}: {cause}"
        return True

    def _forget(self) -> None:
        """A fresh window: answers to rows started before now no longer count."""
        self.answers.clear()
        self.failures = self.streak = 0
        self.incidents.clear()
        self.early.clear()
        self.skipped.clear()
        self.judged = self.issued


class Breakers:
    """Every scope's breaker for one worker, made on first use."""

    def __init__(self, rule: BreakerRule) -> None:
        self.rule = rule
        self.scopes: dict[str, CircuitBreaker] = {}

    @staticmethod
    def scope(alias: str, origin: str = "") -> str:
        """The scope key of a row: its backend alias, plus the origin when a user chose the destination."""
        return f"backend {alias!r}" + (f", origin {origin}" if origin else "")

    def get(self, scope: str) -> CircuitBreaker:
        breaker = self.scopes.get(scope)
        if breaker is None:
            breaker = CircuitBreaker(rule=self.rule, user_chosen=", origin " in scope, name=scope)
            self.scopes[scope] = breaker
        return breaker

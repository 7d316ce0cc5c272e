"""What a drain did (`DeliveryReport`) and the test seams it offers (`Hooks`)."""

from dataclasses import asdict, dataclass
from typing import Any

_SUMS = (
    "batches",
    "claimed",
    "sent",
    "delivered",
    "temporary",
    "permanent",
    "unknown",
    "lease_lost",
    "failed",
    "expired",
    "pruned",
    "skipped",
    "released",
    "held",
    "deferred",
    "groups",
    "fallbacks",
)


@dataclass
class DeliveryReport:
    """What one drain (or one batch) did, for logs, tasks and tests."""

    owner: str
    batches: int = 0
    claimed: int = 0
    sent: int = 0
    delivered: int = 0
    temporary: int = 0
    permanent: int = 0
    unknown: int = 0
    lease_lost: int = 0
    failed: int = 0  # rows that became `failed` (permanent, out of attempts, or their device deactivated)
    expired: int = 0  # rows past their expires_at: ended `expired`, never sent
    pruned: int = 0  # devices deactivated because the provider called their token dead
    skipped: int = 0  # rows found lost before they were sent
    released: int = 0  # unstarted rows handed back (budget spent, a breaker open, quiet hours)
    held: int = 0  # of those, rows held back until their scope's breaker may close
    deferred: int = 0  # of those, rows deferred by the quiet-hours policy at the send (no attempt used)
    groups: int = 0  # answers finished together in one transaction (one guarded UPDATE + one INSERT)
    fallbacks: int = 0  # groups whose one-statement finish failed and were finished row by row
    budget_spent: bool = False
    breaker: str = ""  # why a circuit breaker opened, if one did (the first)
    more_enqueued: bool = False

    def add(self, other: "DeliveryReport") -> None:
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.budget_spent = self.budget_spent or other.budget_spent
        self.breaker = self.breaker or other.breaker

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Hooks:
    """Test seams. `before_send` runs on the worker's thread; `before_finish` wherever the finish runs
    (the worker's thread, unless the completer has a thread of its own)."""

    # Right before a row is handed to the sender (after the budget, breaker and lease checks).
    before_send: Any = None
    # Right before a group of answers is finished, with their primary keys.
    before_finish: Any = None

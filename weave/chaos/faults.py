"""The fault schedule (seeded) and what each fault did, for the recovery figures and the report."""

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from weave.chaos.config import ChaosConfig

KILL, STOP, RESTART = "kill", "stop", "restart"


@dataclass
class Fault:
    at: float  # seconds after the load starts
    kind: str


@dataclass
class HeldRow:
    """A row under a live lease when a fault hit its holder."""

    model: str  # "notification" or "run"
    pk: int
    fence: int
    owner: str


@dataclass
class FaultRecord:
    """One fault as it happened: when (database clock), whom it hit and which rows they held."""

    kind: str
    at: float  # seconds after the load starts
    db_time: datetime | None
    target: str
    held: list[HeldRow] = field(default_factory=list)
    note: str = ""
    resumed_at: float | None = None  # SIGCONT time, for stops


def plan(config: ChaosConfig) -> list[Fault]:
    """Spread the configured faults over the fault window in a seeded random order, at least `fault_gap` apart."""
    rng = random.Random(config.seed)
    kinds = [KILL] * config.kills + [STOP] * config.stops + [RESTART] * config.restarts
    rng.shuffle(kinds)
    start, end = config.fault_window
    if not kinds:
        return []
    # Evenly spaced slots, each jittered within its own slot: random, but never bunched together.
    slot = max(config.fault_gap, (end - start) / len(kinds))
    return [Fault(at=start + i * slot + rng.uniform(0, slot - config.fault_gap), kind=k) for i, k in enumerate(kinds)]


def owner_pid(owner: str) -> int | None:
    """The pid inside an owner name (`prefix:host:pid:tag`, see weave.leases.new_owner)."""
    parts = owner.split(":")
    try:
        return int(parts[-2])
    except (IndexError, ValueError):
        return None


def held_rows(pids: set[int]) -> list[HeldRow]:
    """Rows whose live lease belongs to a process in `pids`, by the database clock."""
    from notifications.models import Notification
    from onboarding.models import OnboardingRun

    rows: list[HeldRow] = []
    for label, model in (("notification", Notification), ("run", OnboardingRun)):
        for pk, fence, owner in model.objects.live().values_list("pk", "fence", "owner"):
            if owner_pid(owner) in pids:
                rows.append(HeldRow(model=label, pk=pk, fence=fence, owner=owner))
    return rows


def lease_holders() -> dict[int, int]:
    """Pid -> number of rows it holds under a live lease right now."""
    from notifications.models import Notification
    from onboarding.models import OnboardingRun

    counts: dict[int, int] = {}
    for model in (Notification, OnboardingRun):
        for owner in model.objects.live().values_list("owner", flat=True):
            pid = owner_pid(owner)
            if pid is not None:
                counts[pid] = counts.get(pid, 0) + 1
    return counts


def describe(record: FaultRecord) -> dict[str, Any]:
    return {"kind": record.kind, "at": round(record.at, 1), "target": record.target, "held": len(record.held)}

"""The fault schedule (seeded) and what each fault did, for the recovery figures and the report."""

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tools.chaos.config import ChaosConfig

KILL, STOP, RESTART, PARTITION = "kill", "stop", "restart", "partition"
DB_RESTART = "db_restart"  # every cluster's PostgreSQL sessions end at once and reconnects fail for a while
PG_RESTART = "pg_restart"  # restart the PostgreSQL server itself (only one the runner controls)
EDGE = "edge"  # the provider fakes' hostile modes on for a while (tools/chaos/edge.py)


@dataclass
class Fault:
    at: float  # share of the jobs finished when it fires (0..1)
    kind: str
    index: int = 0  # its number among faults of its kind


@dataclass
class HeldRow:
    """A row under a live lease when a fault hit its holder."""

    model: str  # "notification" or "run"
    pk: int
    fence: int
    owner: str
    expires_at: datetime | None = None  # the lease's expiry when the fault hit (database clock)


@dataclass
class FaultRecord:
    """One fault as it happened: when (database clock), whom it hit and which rows they held."""

    kind: str
    at: float  # seconds after the load starts
    db_time: datetime | None
    target: str
    held: list[HeldRow] = field(default_factory=list)
    note: str = ""
    resumed_at: float | None = None  # SIGCONT time for stops, healing time for partitions
    back_at: datetime | None = None  # pg_restart: database time once the server answered again
    thawed: bool = False  # a stopped worker that was let go on (not killed while frozen)
    modes: tuple[str, str] = ("", "")  # an edge fault's (webhook mode, HTTP/2 mode or "")


def plan(config: ChaosConfig) -> list[Fault]:
    """Spread the configured faults over the progress window in a seeded random order."""
    rng = random.Random(config.seed)
    kinds = [KILL] * config.kills + [STOP] * config.stops + [RESTART] * config.restarts
    kinds += [PARTITION] * config.partitions + [DB_RESTART] * config.db_restarts + [PG_RESTART] * config.pg_restarts
    kinds += [EDGE] * config.edge_faults
    rng.shuffle(kinds)
    if not kinds:
        return []
    start, end = config.fault_window
    slot = (end - start) / len(kinds)
    seen: dict[str, int] = {}
    faults = []
    for i, kind in enumerate(kinds):
        # Each fault jittered within its own slot: random, but never bunched together.
        faults.append(Fault(at=start + i * slot + rng.uniform(0, slot * 0.8), kind=kind, index=seen.get(kind, 0)))
        seen[kind] = seen.get(kind, 0) + 1
    return faults


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
        for pk, fence, owner, expires in model.objects.live().values_list("pk", "fence", "owner", "lease_expires_at"):
            if owner is not None and owner_pid(owner) in pids:
                rows.append(HeldRow(model=label, pk=pk, fence=fence, owner=owner, expires_at=expires))
    return rows


def lease_holders(model: str | None = None) -> dict[int, int]:
    """Pid -> number of rows it holds under a live lease right now (only `model` rows, if given)."""
    from notifications.models import Notification
    from onboarding.models import OnboardingRun

    counts: dict[int, int] = {}
    for label, queryset in (("notification", Notification.objects), ("run", OnboardingRun.objects)):
        if model not in (None, label):
            continue
        for owner in queryset.live().values_list("owner", flat=True):
            pid = owner_pid(owner or "")
            if pid is not None:
                counts[pid] = counts.get(pid, 0) + 1
    return counts


def describe(record: FaultRecord) -> dict[str, Any]:
    return {"kind": record.kind, "at": round(record.at, 1), "target": record.target, "held": len(record.held)}

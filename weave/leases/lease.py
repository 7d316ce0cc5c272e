"""What a worker holds after a claim: its (owner, fence) pair per row."""

import secrets
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def new_owner(prefix: str = "") -> str:
    """Return a fresh owner name: host, pid and a random tag, so logs show where a worker ran.

    Uniqueness is a courtesy, not the guard: every guarded write also checks the fence.
    """
    import os

    tag = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    return f"{prefix}{tag}"[:100]


@dataclass(frozen=True)
class Lease:
    """One row held by `owner` at `fence`. `expires_at` is the database's value at claim time."""

    pk: Any
    owner: str
    fence: int
    expires_at: datetime | None = None

    def describe(self) -> str:
        return f"owner {self.owner} at fence {self.fence}"


@dataclass
class BatchLease:
    """Many rows claimed in one statement under one owner; each row has its own fence.

    `fences` holds the rows still ours. Rows leave it when finished, released or found lost.
    """

    owner: str
    fences: dict[Any, int] = field(default_factory=dict)
    expires_at: datetime | None = None

    def lease(self, pk: Any) -> Lease:
        return Lease(pk=pk, owner=self.owner, fence=self.fences[pk], expires_at=self.expires_at)

    def drop(self, pk: Any) -> None:
        self.fences.pop(pk, None)

    def __len__(self) -> int:
        return len(self.fences)

    def __contains__(self, pk: Any) -> bool:
        return pk in self.fences

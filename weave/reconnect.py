"""The broker mixin's old home: it lives in `weave.broker` now; sites naming this path keep working."""

from weave.broker import ReconnectingORM, ReconnectOnDequeue

__all__ = ["ReconnectOnDequeue", "ReconnectingORM"]

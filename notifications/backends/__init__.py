"""Push backends: the interface the worker sends through, the registry, and the generic webhook.

from notifications.backends import PushBackend, PushMessage, SendResult, Outcome, get_backend
"""

from notifications.backends.base import Outcome, Priority, PushBackend, PushMessage, SendResult
from notifications.backends.registry import (
    DEFAULT_ALIAS,
    backend_aliases,
    backend_configs,
    backend_problems,
    get_backend,
)

__all__ = [
    "DEFAULT_ALIAS",
    "Outcome",
    "Priority",
    "PushBackend",
    "PushMessage",
    "SendResult",
    "backend_aliases",
    "backend_configs",
    "backend_problems",
    "get_backend",
]

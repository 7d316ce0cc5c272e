"""Push providers: the interface the worker talks to, and what a send can end as."""

from notifications.providers.base import Outcome, Provider, PushMessage, SendResult
from notifications.providers.http import HttpJsonProvider

__all__ = ["HttpJsonProvider", "Outcome", "Provider", "PushMessage", "SendResult"]

"""Push delivery: the pure policy (`policy`), the sending loop (`sender`), the worker (`worker`).

from notifications.delivery import drain, deliver_batch, PushWorker, Hooks
"""

from notifications.delivery.policy import CircuitBreaker
from notifications.delivery.worker import DeliveryReport, Hooks, PushWorker, deliver_batch, drain

__all__ = ["CircuitBreaker", "DeliveryReport", "Hooks", "PushWorker", "deliver_batch", "drain"]

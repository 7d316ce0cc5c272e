"""Push delivery: the pure policy (`policy`), the claim buffer (`claims`), the sender (`sender`), the
completer (`completer`) and the worker loop that feeds them (`worker`).

from notifications.delivery import drain, deliver_batch, PushWorker, Hooks
"""

from notifications.delivery.breaker import CircuitBreaker
from notifications.delivery.report import DeliveryReport, Hooks
from notifications.delivery.worker import PushWorker, deliver_batch, drain

__all__ = ["CircuitBreaker", "DeliveryReport", "Hooks", "PushWorker", "deliver_batch", "drain"]

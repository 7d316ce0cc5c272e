"""Bench-only: the FCM and APNs backends on httpx's HTTP/2 stack, as they were before the lean client.

Configured under their own aliases by `bench/protocols.py` ("fcm-httpx", "apns-httpx"), so the same
run measures the backends with the lean client (`notifications.backends.h2transport`) and with httpx
side by side, on the same fakes.
"""

from typing import Any

from notifications.backends.apns import APNsBackend
from notifications.backends.credentials import tls_context
from notifications.backends.fcm import FCMBackend
from notifications.backends.http import make_client


class HttpxFCM(FCMBackend):
    def make_client(self, **extra: Any) -> Any:
        return make_client(timeout=self.timeout, concurrency=self.concurrency, http2=True,
                           verify=tls_context(self.ca_file))  # fmt: skip


class HttpxAPNs(APNsBackend):
    def make_client(self, **extra: Any) -> Any:
        return make_client(timeout=self.timeout, concurrency=self.concurrency, http2=True,
                           verify=tls_context(self.ca_file), http1=False)  # fmt: skip

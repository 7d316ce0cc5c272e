"""The honest anchor of issue 16: what a Django team would deploy instead of Weave. Bench only.

One Celery task per push, on the Redis broker, acks_late and prefetch 1: the task locks the row (a
conditional UPDATE that takes it only if nobody holds it), POSTs it with a shared httpx client, and marks
it delivered. Started as `celery -A bench.celery_app worker --pool threads -c 20`; with DB_CONN_MAX_AGE=0
it is "Django defaults" (a new database connection per task), otherwise connections are reused.

Every key and the queue are prefixed `wake-bench` so that runs do not meet other users of the Redis.
"""

import os
import sys
import threading
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from celery import Celery  # noqa: E402
from django.db.models import F, Q  # noqa: E402

from notifications.models import Notification  # noqa: E402
from weave.conf import weave_settings  # noqa: E402
from weave.leases import DbNow  # noqa: E402

QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "wake-bench")
# Celery's Django fixup closes every database connection before and after each task (unless
# CELERY_DB_REUSE_MAX is set), whatever CONN_MAX_AGE says: that is "Django defaults", a new connection per
# task. Tuned (DB_CONN_MAX_AGE > 0) leaves the fixup out, so each thread keeps its connection.
REUSE = os.environ.get("DB_CONN_MAX_AGE", "60") != "0"
app = Celery(
    "wake-bench",
    broker=os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/0"),
    fixups=[] if REUSE else None,
)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_default_queue=QUEUE,
    broker_transport_options={"global_keyprefix": "wake-bench:"},
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

_client: httpx.Client | None = None
_lock = threading.Lock()


def _http() -> httpx.Client:
    global _client
    with _lock:
        if _client is None:
            _client = httpx.Client(timeout=weave_settings.PUSH_TIMEOUT, limits=httpx.Limits(max_connections=200))
        return _client


@app.task(name="bench.celery_send_push")
def send_push(notification_id: int) -> str:
    owner = f"celery:{os.getpid()}:{threading.get_ident()}"
    free = Q(owner__isnull=True) | Q(lease_expires_at__lte=DbNow())
    locked = Notification.objects.filter(free, pk=notification_id, status=Notification.Status.PENDING).update(
        owner=owner, fence=F("fence") + 1, lease_expires_at=DbNow(timedelta(seconds=30))
    )
    if not locked:
        return "skipped"
    row = Notification.objects.values("device_token", "title", "body", "data", "idempotency_key").get(
        pk=notification_id
    )
    response = _http().post(
        weave_settings.PUSH_URL,
        headers={
            "Authorization": f"Bearer {weave_settings.PUSH_TOKEN}",
            "Idempotency-Key": str(row["idempotency_key"]),
        },
        json={"to": row["device_token"], "title": row["title"], "body": row["body"], "data": row["data"]},
    )
    status = Notification.Status.DELIVERED if response.is_success else Notification.Status.FAILED
    Notification.objects.filter(pk=notification_id, owner=owner).update(
        status=status, delivered_at=DbNow(), attempts=F("attempts") + 1, owner=None, lease_expires_at=None
    )
    return status

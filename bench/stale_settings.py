"""Settings of bench/stale_writes.py: the demo site plus django-tasks-db, with both task backends."""

import os

# DEBUG off, as in production: with DEBUG on Django keeps every query, a cost that grows with the
# statements a backend makes per task. The demo settings then want these; the bench needs no real ones.
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "weave-bench-only-not-a-secret-" + "x" * 32)
os.environ.setdefault("WEAVE_PUSH_URL", "http://127.0.0.1:8100/push")
os.environ.setdefault("WEAVE_PUSH_TOKEN", "bench-token-not-a-secret")
os.environ.setdefault("WEAVE_LOG_LEVEL", "WARNING")

from demo.settings import *  # noqa: E402, F403

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]  # noqa: F405
TASKS = {
    "default": {"BACKEND": "weave.tasks.WeaveBackend"},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}
WEAVE = {**WEAVE, "LEASE_TTL": float(os.environ.get("STALE_LEASE_TTL", "1.0"))}  # noqa: F405

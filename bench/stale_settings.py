"""Settings of bench/stale_writes.py: the demo site plus django-tasks-db, with both task backends."""

import os

os.environ.setdefault("DEBUG", "true")

from demo.settings import *  # noqa: E402, F403

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]  # noqa: F405
TASKS = {
    "default": {"BACKEND": "weave.tasks.WeaveBackend"},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}
WEAVE = {**WEAVE, "LEASE_TTL": float(os.environ.get("STALE_LEASE_TTL", "1.0"))}  # noqa: F405

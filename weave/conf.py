"""The `WEAVE` settings dict: frozen defaults, merged with the site's settings when read.

Values are read on every attribute access, never cached at import, so a test that changes
`settings.WEAVE` (pytest-django's `settings` fixture) is seen at once.
"""

from types import MappingProxyType
from typing import Any

from django.conf import settings as django_settings

DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {
        # --- leases (seconds) ---
        "LEASE_TTL": 30.0,
        # Heartbeat renewal interval; None means a third of the lease TTL. A TTL shorter than three
        # intervals leaves no room for one late renewal (a system check refuses it).
        "HEARTBEAT_INTERVAL": None,
        # --- push notifications ---
        "PUSH_URL": "",
        "PUSH_TOKEN": "",
        "PUSH_TIMEOUT": 10.0,  # per request, seconds
        "PUSH_BATCH_SIZE": 100,  # rows claimed under one lease
        "PUSH_CONCURRENCY": 20,  # requests in flight per worker
        "PUSH_BUDGET": 60.0,  # seconds a drain may start new rows; must stay below Q_CLUSTER timeout
        "PUSH_LEASE_TTL": 30.0,
        "PUSH_MAX_ATTEMPTS": 5,
        "PUSH_BACKOFF_BASE": 2.0,  # seconds; doubled per attempt, with jitter
        "PUSH_BACKOFF_MAX": 3600.0,
        "PUSH_MAX_PAYLOAD_BYTES": 4096,
        "PUSH_BREAKER_THRESHOLD": 5,  # consecutive systemic failures (5xx, 429, unreachable) that stop a batch
        "PUSH_BREAKER_COOLDOWN": 30.0,  # seconds rows released by the breaker wait before they are due again
        # --- waking workers for due work (weave.wake) ---
        "WAKE_WATCHER": True,  # run a due-time watcher thread in every django-q2 worker process
        "WAKE_HOLD": 10.0,  # seconds a queued task holds its request slot if it never starts
        "WAKE_GRACE": 0.2,  # seconds a watcher leaves work found due after a notification to its task
        "WAKE_POLL_MAX": 1.0,  # longest poll on SQLite, and the longest backoff while work stays overdue
        "WAKE_IDLE": 30.0,  # longest LISTEN on PostgreSQL with nothing due (a safety net: NOTIFY wakes it)
        # --- supplier onboarding ---
        "SUPPLIER_API_URL": "",
        "SUPPLIER_API_TIMEOUT": 10.0,
        "ONBOARDING_LEASE_TTL": 30.0,
        "ONBOARDING_BUDGET": 90.0,  # seconds one attempt may work; below Q_CLUSTER timeout
        "ONBOARDING_STEP_RETRIES": 3,  # temporary failures retried within a step
        "ONBOARDING_RETRY_BACKOFF": 0.5,  # seconds, doubled per retry
        "ONBOARDING_RETRY_AFTER_MAX": 30.0,  # seconds; a longer Retry-After is capped to this
        # A run released on a temporary failure is due again after this backoff (doubled per release,
        # with jitter), or after the service's Retry-After when it sent one.
        "ONBOARDING_RELEASE_BACKOFF": 2.0,
        "ONBOARDING_RELEASE_BACKOFF_MAX": 300.0,
    }
)


class WeaveSettings:
    """Read-through view of `settings.WEAVE` over `DEFAULTS`."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown Weave setting {name!r}; known: {', '.join(sorted(DEFAULTS))}")
        overrides = getattr(django_settings, "WEAVE", None) or {}
        return overrides.get(name, DEFAULTS[name])

    def unknown_keys(self) -> list[str]:
        overrides = getattr(django_settings, "WEAVE", None) or {}
        return sorted(set(overrides) - set(DEFAULTS))


weave_settings = WeaveSettings()

"""Quiet hours: the site's per-user policy (`WEAVE["PUSH_QUIET_HOURS"]`), asked at creation and again at the send.

The policy is a `callable(user, at, priority)` returning None (the push may go at `at`) or the aware
datetime when it may. It is read lazily and costs nothing when the setting is empty: callers test
`quiet_hours_policy()` before they fetch any user.
"""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from notifications.validation import SEND_AT_WINDOW
from weave.conf import weave_settings

Policy = Callable[[Any, datetime, str], datetime | None]
_STAMP = "%Y-%m-%d %H:%M:%S UTC"


def quiet_hours_policy() -> Policy | None:
    """The site's policy, or None when `PUSH_QUIET_HOURS` is empty (no import, no query)."""
    path = weave_settings.PUSH_QUIET_HOURS
    if not path:
        return None
    policy: Policy = import_string(path)
    return policy


def quiet_until(policy: Policy, user: Any, at: datetime, priority: str) -> datetime | None:
    """When a push for `user` due at `at` may go by `policy`: a later aware datetime, or None for now."""
    later = policy(user, at, priority)
    if later is None:
        return None
    if not isinstance(later, datetime) or later.tzinfo is None or later.utcoffset() is None:
        raise ImproperlyConfigured(
            f"WEAVE PUSH_QUIET_HOURS ({weave_settings.PUSH_QUIET_HOURS}) must return an aware datetime or None."
        )
    if later <= at:
        return None
    if later - at > SEND_AT_WINDOW:
        # A row due past the window could never be shown or sent (see `check_send_at`).
        raise ImproperlyConfigured(
            f"WEAVE PUSH_QUIET_HOURS ({weave_settings.PUSH_QUIET_HOURS}) deferred a push to {later.isoformat()}, "
            f"more than {SEND_AT_WINDOW.days} days after {at.isoformat()}."
        )
    return later


def policy_failure(exc: Exception) -> str:
    """The words for a policy that raised (a site's bug, such as a user's stored zone that does not exist)."""
    return f"the quiet-hours policy raised {type(exc).__name__}: {exc}"[:300]


def deferral_reason(at: datetime, later: datetime, *, when: str = "") -> str:
    """The reason a deferred row carries: from when to when, and that it used no attempt."""
    span = f"from {at.astimezone(UTC):{_STAMP}} to {later.astimezone(UTC):{_STAMP}}"
    return f"Deferred by the quiet-hours policy{when} {span}; no attempt used."


DEFERRAL_PREFIX = "Deferred by the quiet-hours policy"

"""System checks for push settings that would let a lease run out under a request, or a task be killed mid-batch."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning

from weave.conf import weave_settings


@register(Tags.compatibility)
def check_push_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a lease TTL shorter than a request, or a budget that outlasts the django-q2 timeout."""
    errors: list[Error] = []
    if not weave_settings.valid("PUSH_LEASE_TTL", "PUSH_TIMEOUT", "PUSH_BUDGET"):
        return errors  # weave.E006 reports a value of the wrong type or range
    ttl, timeout, budget = weave_settings.PUSH_LEASE_TTL, weave_settings.PUSH_TIMEOUT, weave_settings.PUSH_BUDGET
    if ttl <= timeout:
        errors.append(
            Error(
                f"WEAVE PUSH_LEASE_TTL ({ttl}) must be greater than PUSH_TIMEOUT ({timeout}): a request that "
                "times out would outlive the lease it was sent under.",
                hint="Make the lease TTL at least a few times the request timeout, e.g. TTL 30, timeout 10.",
                id="notifications.E001",
            )
        )
    q_timeout = (getattr(settings, "Q_CLUSTER", None) or {}).get("timeout")
    if isinstance(q_timeout, (int, float)) and budget + timeout >= q_timeout:
        errors.append(
            Error(
                f"WEAVE PUSH_BUDGET ({budget}) + PUSH_TIMEOUT ({timeout}) must stay below Q_CLUSTER['timeout'] "
                f"({q_timeout}): django-q2 would kill a drain while its last requests are still out.",
                hint="Lower PUSH_BUDGET or raise Q_CLUSTER['timeout'].",
                id="notifications.E002",
            )
        )
    return errors


@register(Tags.compatibility)
def check_provider_url(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse an installed notifications app with nowhere to send, and every misconfigured push backend."""
    from notifications.backends import backend_problems

    errors = []
    for alias, problem in backend_problems():
        errors.append(
            Error(
                f"WEAVE push backend {alias!r}: {problem}",
                hint=(
                    "Set WEAVE = {'PUSH_URL': 'https://push.example.com/send', 'PUSH_TOKEN': ...}, or configure "
                    "WEAVE['PUSH_BACKENDS'] = {alias: {'BACKEND': dotted path, 'OPTIONS': {...}}}."
                ),
                id="notifications.E003",
            )
        )
    return errors


@register(Tags.security)
def check_device_destinations(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when Web Push may reach loopback outside development, and refuse host patterns that match nothing."""
    from notifications.backends.destinations import allowed_hosts

    found: list[CheckMessage] = []
    if not weave_settings.valid("PUSH_WEBPUSH_HOSTS", "PUSH_WEBPUSH_EXTRA_HOSTS", "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK"):
        return found  # weave.E006 reports a value of the wrong type
    if weave_settings.PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK and not settings.DEBUG:
        found.append(
            CheckWarning(
                "WEAVE PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK is on with DEBUG off: any user can register a Web Push "
                "endpoint on this machine's loopback interface and have the workers post to it.",
                hint="Turn it off; it exists for local push fakes in tests and the demo only.",
                id="notifications.W004",
            )
        )
    for pattern in allowed_hosts():
        bare = pattern.strip().lower().removeprefix("*.")
        if pattern.strip() != "*" and (not bare or "*" in bare or "/" in bare or ":" in bare or "@" in bare):
            found.append(
                Error(
                    f"WEAVE PUSH_WEBPUSH_HOSTS / PUSH_WEBPUSH_EXTRA_HOSTS entry {pattern!r} is not a host name, "
                    "*.suffix or *.",
                    hint='Write host names only, e.g. "push.example.com" or "*.push.example.com".',
                    id="notifications.E005",
                )
            )
    return found


# Backends whose libraries come as an extra, by class (a site's subclass inherits the need).
_BACKEND_EXTRAS = {
    "notifications.backends.fcm.FCMBackend": "fcm",
    "notifications.backends.apns.APNsBackend": "apns",
    "notifications.backends.webpush.WebPushBackend": "webpush",
}


def _backend_extra(path: str) -> str | None:
    """The extra the backend at `path` needs, or None (a missing module that no extra provides is E003's)."""
    from django.utils.module_loading import import_string

    from weave.extras import extra_for_module

    try:
        cls = import_string(path)
    except ImportError as exc:
        return extra_for_module(getattr(exc, "name", None))
    for klass in getattr(cls, "__mro__", ()):
        extra = _BACKEND_EXTRAS.get(f"{klass.__module__}.{klass.__qualname__}")
        if extra:
            return extra
    return None


@register(Tags.compatibility)
def check_backend_extras(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Name the missing extra of every configured push backend whose libraries are not installed."""
    from django.core.exceptions import ImproperlyConfigured

    from notifications.backends import backend_configs
    from weave.extras import install_hint, problem

    try:
        configs = backend_configs()
    except ImproperlyConfigured:
        return []  # notifications.E003 reports the malformed setting
    errors = []
    for alias, config in sorted(configs.items()):
        extra = _backend_extra(str(config.get("BACKEND", "")))
        found = problem(extra, f"WEAVE push backend {alias!r} ({config['BACKEND']})") if extra else None
        if found:
            errors.append(Error(found, hint=install_hint(extra or ""), id="notifications.E004"))
    return errors

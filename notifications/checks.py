"""System checks for push settings that would let a lease run out under a request, or a task be killed mid-batch."""

import re
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured

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
    from notifications.backends.registry import backend_configs

    try:
        configs = backend_configs()
    except ImproperlyConfigured:
        configs = {}
    return [
        Error(
            f"WEAVE push backend {alias!r}: {problem}",
            hint=backend_hint(alias, str(configs.get(alias, {}).get("BACKEND", "")), problem),
            id="notifications.E003",
        )
        for alias, problem in backend_problems()
    ]


# What each backend's option holds, in words a hint can tell the reader to set it to.
_OPTION_MEANS = {
    "project_id": "your Firebase project id",
    "credentials_file": "the service-account JSON key from the Firebase console (Project settings > Service "
    "accounts > Generate new private key)",
    "team_id": "your Apple Developer team id",
    "key_id": "the id of your APNs signing key",
    "key_file": "the .p8 APNs signing key downloaded from your Apple Developer account (Keys)",
    "topic": "your app's bundle id",
    "vapid_private_key_file": "a PEM file holding your VAPID private key (P-256), e.g. made with "
    "`openssl ecparam -name prime256v1 -genkey -noout -out vapid-private.pem`",
    "vapid_subject": "a mailto: or https:// URL where push services can reach you",
    "url": "your push gateway's http(s):// endpoint",
    "token": "the bearer token your gateway expects (a string)",
    "ca_file": "a PEM bundle of the CA certificates to trust (or leave it out to trust the system's)",
}
_BACKEND_PAGES = {"fcm": "fcm", "apns": "apns", "webpush": "webpush", "webhook": "webhook"}
_OPTION_RE = re.compile(r"OPTIONS\['(\w+)'\]")


def backend_hint(alias: str, path: str, problem: str) -> str:
    """A hint that fixes `problem` of backend `alias`: the option to set, to what, and where the page is."""
    from notifications.backends.registry import WEBHOOK

    if alias == "*" or not path:
        return (
            "Set WEAVE['PUSH_BACKENDS'] = {alias: {'BACKEND': dotted path, 'OPTIONS': {...}}} "
            "(docs/backends/index.md), or leave it out and set WEAVE['PUSH_URL'] for the webhook backend."
        )
    if problem.startswith("Cannot import") or "is not a notifications.backends" in problem:
        return f"Correct WEAVE['PUSH_BACKENDS'][{alias!r}]['BACKEND']: a PushBackend class's dotted path."
    module = path.rsplit(".", 2)[-2] if "." in path else ""
    page = f"docs/backends/{_BACKEND_PAGES.get(module, 'index')}.md"
    if path == WEBHOOK and alias == "default":
        return (
            "Set WEAVE['PUSH_URL'] to your push gateway's http(s):// endpoint (and WEAVE['PUSH_TOKEN'] to its "
            f"bearer token), or configure WEAVE['PUSH_BACKENDS'] instead; see {page}."
        )
    found = _OPTION_RE.search(problem)
    option = found.group(1) if found else ""
    where = f"WEAVE['PUSH_BACKENDS'][{alias!r}]['OPTIONS'][{option!r}]"
    if problem.startswith("Unknown OPTIONS") or not option:
        return f"Use only the options {page} lists for this backend, spelled as there."
    means = _OPTION_MEANS.get(option, "the value described there")
    if option.endswith("_file") and "is required" not in problem:
        return (
            f"Put {means} at that path, or point {where} at where it is; the file must be readable by the user that "
            f"runs manage.py and qcluster. See {page}."
        )
    return f"Set {where} to {means}; see {page}."


@register(Tags.compatibility)
def check_webhook_token(app_configs: Any = None, **kwargs: Any) -> list[CheckWarning]:
    """Warn when a webhook backend has a URL but no token: it sends no Authorization header at all."""
    from notifications.backends.registry import backend_class, backend_configs
    from notifications.backends.webhook import WebhookBackend

    try:
        configs = backend_configs()
    except ImproperlyConfigured:
        return []  # notifications.E003 reports the malformed setting
    found = []
    for alias, config in sorted(configs.items()):
        try:
            webhook = issubclass(backend_class(str(config["BACKEND"])), WebhookBackend)
        except ImproperlyConfigured:
            continue  # notifications.E003
        options = config["OPTIONS"]
        if not webhook or not options.get("url") or options.get("token"):
            continue
        setting = f"WEAVE['PUSH_BACKENDS'][{alias!r}]['OPTIONS']['token']"
        if alias == "default" and "default" not in (weave_settings.PUSH_BACKENDS or {}):
            setting = "WEAVE['PUSH_TOKEN']"
        found.append(
            CheckWarning(
                f"WEAVE push backend {alias!r} (a webhook) has no token: its requests carry no Authorization "
                "header, and a gateway that wants one refuses every notification (401).",
                hint=f"Set {setting} to the bearer token your gateway expects, e.g. from the environment: "
                "os.environ.get('PUSH_TOKEN', ''). If your gateway takes no token, add 'notifications.W006' to "
                "SILENCED_SYSTEM_CHECKS.",
                id="notifications.W006",
            )
        )
    return found


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

"""WEAVE["PUSH_BACKENDS"]: alias -> {"BACKEND": dotted path, "OPTIONS": {...}}, shaped like Django's STORAGES.

When the site sets no PUSH_BACKENDS (or sets some without a "default"), the "default" alias is the
webhook backend built from PUSH_URL / PUSH_TOKEN, so sites configured before backends existed keep
working unchanged.
"""

import logging
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from notifications.backends.base import PushBackend
from weave.conf import weave_settings

logger = logging.getLogger("weave.notifications")

DEFAULT_ALIAS = "default"
WEBHOOK = "notifications.backends.webhook.WebhookBackend"


def backend_configs() -> dict[str, dict[str, Any]]:
    """Return every configured alias with its BACKEND and OPTIONS, the implicit webhook default included."""
    configured = weave_settings.PUSH_BACKENDS or {}
    if not isinstance(configured, Mapping):
        raise ImproperlyConfigured("WEAVE PUSH_BACKENDS must be a dict of alias -> {'BACKEND': ..., 'OPTIONS': ...}.")
    configs = {
        str(alias): {"BACKEND": (entry or {}).get("BACKEND", ""), "OPTIONS": dict((entry or {}).get("OPTIONS") or {})}
        for alias, entry in configured.items()
    }
    if DEFAULT_ALIAS not in configs and (weave_settings.PUSH_URL or not configs):
        configs[DEFAULT_ALIAS] = {
            "BACKEND": WEBHOOK,
            "OPTIONS": {"url": weave_settings.PUSH_URL, "token": weave_settings.PUSH_TOKEN},
        }
    return configs


def backend_path(alias: str) -> Any:
    """The BACKEND `backend_configs()` gives `alias` (None: not configured), without copying every alias's
    OPTIONS: the hand-over asks this on every push, and needs nothing else of the configuration.
    Any: the site's value as written, a dotted path once the checks pass."""
    configured = weave_settings.PUSH_BACKENDS or {}
    if isinstance(configured, Mapping):
        entry = configured.get(alias)
        if isinstance(entry, Mapping):
            return entry.get("BACKEND", "")
        if not configured and alias == DEFAULT_ALIAS:
            return WEBHOOK  # nothing configured: the implicit default
    config = backend_configs().get(alias)  # the implicit webhook default, an empty entry, or a refusal
    return None if config is None else config["BACKEND"]


def backend_aliases() -> list[str]:
    return sorted(backend_configs())


def backend_class(path: str) -> type[PushBackend]:
    """Import the class at `path` and make sure it is a PushBackend."""
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"Cannot import push backend {path!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, PushBackend)):
        raise ImproperlyConfigured(f"{path!r} is not a notifications.backends.PushBackend subclass.")
    return cls


def get_backend(
    alias: str = DEFAULT_ALIAS, *, timeout: float | None = None, concurrency: int | None = None
) -> PushBackend:
    """Return a new backend instance for `alias`. The caller owns it and must `await backend.aclose()`.

    A new instance per caller, not a cached one: its HTTP client belongs to the event loop that uses it.
    `concurrency` (None: `default_window` of its class) is how many requests it may have out at once.
    """
    configs = backend_configs()
    if alias not in configs:
        known = ", ".join(sorted(configs)) or "none"
        raise ImproperlyConfigured(f"No push backend {alias!r} in WEAVE PUSH_BACKENDS (configured: {known}).")
    config = configs[alias]
    cls = backend_class(config["BACKEND"])
    return cls(
        alias=alias,
        options=config["OPTIONS"],
        timeout=weave_settings.PUSH_TIMEOUT if timeout is None else timeout,
        concurrency=default_window(cls) if concurrency is None else concurrency,
    )


def default_window(cls: type[PushBackend]) -> int:
    """Requests in flight per worker on a backend of class `cls` unless the caller says otherwise.

    HTTP/2 multiplexes streams on one connection per origin, so a wide window costs a provider no
    connections (PUSH_HTTP2_CONCURRENCY); on HTTP/1.1 every request in flight is a connection of its own
    to the site's gateway (PUSH_CONCURRENCY)."""
    if cls.supports_http2:
        return int(weave_settings.PUSH_HTTP2_CONCURRENCY)
    return int(weave_settings.PUSH_CONCURRENCY)


def backend_problems() -> list[tuple[str, str]]:
    """Return (alias, problem) for every alias whose backend cannot be imported or whose options are wrong."""
    try:
        configs = backend_configs()
    except ImproperlyConfigured as exc:
        return [("*", str(exc))]
    problems = []
    for alias, config in sorted(configs.items()):
        try:
            cls = backend_class(config["BACKEND"])
        except ImproperlyConfigured as exc:
            problems.append((alias, str(exc)))
            continue
        problems.extend((alias, problem) for problem in cls.check_options(alias, config["OPTIONS"]))
    return problems


def prepare_backends() -> None:
    """Make the shared credentials of every correctly configured backend ready (`PushBackend.prepare`).

    A worker's warm-up: a backend that cannot be prepared now is left to its first drain, which reports
    why. Nothing here waits on the network or builds a client (clients belong to a drain's event loop)."""
    broken = {alias for alias, _ in backend_problems()}
    if "*" in broken:
        return  # PUSH_BACKENDS itself is not a mapping: nothing to prepare
    for alias, config in sorted(backend_configs().items()):
        if alias in broken:
            continue
        try:
            backend_class(config["BACKEND"]).prepare(config["OPTIONS"], timeout=float(weave_settings.PUSH_TIMEOUT))
        except Exception:  # noqa: BLE001 - only a head start; the first drain meets (and reports) the same problem
            logger.debug("event=backend_prepare_failed alias=%s", alias, exc_info=True)

"""The optional parts of the package (`pip install "weave-jobs[fcm]"` ...) and whether they are installed.

The core dependencies are Django, django-q2 and httpx: enough to import every app. A push backend, the
onboarding app's number checks and the metrics endpoint each need libraries a site may not want, so
they come as extras and are imported only where they are used. The system checks name the extra a
configured feature is missing (`weave.E007`, `notifications.E004`, `onboarding.E004`) instead of
letting the first task fail on an `ImportError`.
"""

from importlib.util import find_spec
from typing import Any

from django.core.checks import Error, Tags, register

__all__ = [
    "EXTRAS",
    "extra_for_module",
    "install_hint",
    "missing_modules",
    "problem",
]

# extra -> the top-level modules it provides (the names `import` uses, not the distribution names).
EXTRAS: dict[str, tuple[str, ...]] = {
    "fcm": ("jwt", "cryptography"),
    "apns": ("jwt", "cryptography"),
    "webpush": ("http_ece", "py_vapid", "cryptography"),
    "onboarding": ("stdnum", "schwifty", "pycountry"),
    "metrics": ("prometheus_client",),
    "testing": ("hypercorn",),
}


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or a half-installed one
        return False


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (empty when the extra is installed)."""
    return [module for module in EXTRAS[extra] if not _importable(module)]


def extra_for_module(module: str | None) -> str | None:
    """The extra that provides `module` (or one of its parents), if any: to name it in an error."""
    if not module:
        return None
    for extra, modules in EXTRAS.items():
        if any(module == name or module.startswith(name + ".") or name.startswith(module + ".") for name in modules):
            return extra
    return None


def install_hint(extra: str) -> str:
    return f'Install the extra: pip install "weave-jobs[{extra}]".'


def problem(extra: str, feature: str) -> str | None:
    """Say what `feature` lacks when `extra` is not fully installed, or None when it is."""
    missing = missing_modules(extra)
    if not missing:
        return None
    return f"{feature} needs the [{extra}] extra, and {', '.join(missing)} cannot be imported."


def metrics_mounted() -> bool:
    """Whether the site's URLconf serves Weave's metrics endpoint (`include("weave.urls")`)."""
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("weave:metrics")
    except NoReverseMatch:
        return False
    except Exception:  # noqa: BLE001 - a broken URLconf is Django's own check (urls.E*) to report
        return False
    return True


@register(Tags.compatibility)
def check_metrics_extra(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Name the [metrics] extra when the site mounts the Prometheus endpoint without prometheus_client."""
    if not metrics_mounted():
        return []
    found = problem("metrics", "The metrics endpoint (weave.urls, mounted in your URLconf)")
    return [Error(found, hint=install_hint("metrics"), id="weave.E007")] if found else []

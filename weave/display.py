"""What Weave shows people: times with seconds and zone, links between rows, and text redacted on the way out.

Outside text is sanitized before it is stored (`weave.sanitize.outside_text`). `shown()` is the second
line: whatever a table holds, a page or a printed timeline never shows the push token, a credential
header, or a password from a configured URL, to any user, view-only ones included.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db import models
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html

from weave.conf import secret_values
from weave.sanitize import decode, redact


def timestamp(value: datetime | None) -> str:
    """A time as operators read it everywhere in Weave: seconds and the zone, e.g. 2026-11-29 11:42:07 UTC."""
    if value is None:
        return "—"
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def timestamp_column(field: str, description: str | None = None) -> Callable[[Any, Any], str]:
    """A ModelAdmin/inline display method showing `field` with `timestamp()`, sortable by the field."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def show(self: Any, obj: Any) -> str:
        return timestamp(getattr(obj, field))

    show.__name__ = f"{field}_display"
    return show


def admin_link(obj: models.Model | None, text: object = None) -> str:
    """A link to `obj`'s admin change page (plain text when it has none)."""
    if obj is None:
        return "—"
    meta = obj._meta
    try:
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    except NoReverseMatch:
        return str(text or obj)
    return format_html('<a href="{}">{}</a>', url, text or obj)


def admin_link_to(app_label: str, model_name: str, pk: object, text: object) -> str:
    """A link to a change page named by app label and model, for rows of an app this one may not import."""
    try:
        url = reverse(f"admin:{app_label}_{model_name}_change", args=[pk])
    except NoReverseMatch:
        return str(text)
    return format_html('<a href="{}">{}</a>', url, text)


def changelist_link(model: type[models.Model], text: object, **filters: object) -> str:
    """A link to `model`'s admin list, filtered by `filters` (e.g. supplier__id__exact=3)."""
    meta = model._meta
    try:
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    except NoReverseMatch:
        return str(text)
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return format_html('<a href="{}?{}">{}</a>', url, query, text)


def known_secrets() -> list[str]:
    """The configured secrets: every key declared secret, and any userinfo in the configured service URLs."""
    return secret_values()


def shown(text: str) -> str:
    """Return `text` fit to show a person: decoded, NUL-free, secrets and credentials redacted."""
    return redact(decode(text).replace("\x00", "\ufffd"), known_secrets())

"""What Weave shows people: times with seconds and zone, links between rows, and text redacted on the way out.

Outside text is sanitized before it is stored (`weave.sanitize.outside_text`). `shown()` is the second
line: whatever a table holds, a page or a printed timeline never shows the push token, a credential
header, or a password from a configured URL, to any user, view-only ones included.
"""

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db import models
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from weave.conf import secret_values
from weave.sanitize import decode, redact
from weave.wording import how_many


def timestamp(value: datetime | None) -> str:
    """A time as operators read it everywhere in Weave: seconds and the zone, e.g. 2026-11-29 11:42:07 UTC."""
    if value is None:
        return "—"
    if timezone.is_aware(value):
        try:
            value = timezone.localtime(value)
        except OverflowError:  # the calendar's last (or first) hours in a zone past them: shown in UTC
            value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def timestamp_column(field: str, description: str | None = None) -> Callable[[Any, Any], str]:
    """A ModelAdmin/inline display method showing `field` with `timestamp()`, sortable by the field."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def show(self: Any, obj: Any) -> str:
        return timestamp(getattr(obj, field))

    show.__name__ = f"{field}_display"
    return show


def state_column(field: str, description: str, *, sortable: bool = False) -> Callable[[Any, Any], str]:
    """A display method showing a state or outcome `field` as its word (`state_word()`)."""

    @admin.display(description=description, ordering=field if sortable else None)
    def show(self: Any, obj: Any) -> str:
        return state_word(getattr(obj, field))

    show.__name__ = f"{field}_word"
    return show


def reason_column(field: str = "reason", *, clip: bool = False) -> Callable[[Any, Any], str]:
    """A display method showing a stored reason said once: whole on a detail page, `clip` for a list."""

    @admin.display(description="reason")
    def show(self: Any, obj: Any) -> str:
        text = said_once(getattr(obj, field))
        return clipped(text) if clip else shown(text)

    show.__name__ = f"shown_{field}"
    return show


def linked(text: object, url: str | None) -> SafeString:
    """`text` as a link to `url`, or as plain text where there is none (a model without an admin)."""
    return format_html('<a href="{}">{}</a>', url, text) if url else format_html("{}", text)


def counted(n: int, noun: str, url: str | None) -> SafeString:
    """ "3 failed runs" ("1 failed run"), linked to `url`; `noun` holds "{}" where a plural's "s" goes."""
    return linked(how_many(n, noun), url)


def admin_link(obj: models.Model | None, text: object = None) -> str:
    """A link to `obj`'s admin change page (plain text when it has none)."""
    return "—" if obj is None else linked(text or obj, change_url(type(obj), obj.pk))


def admin_link_to(app_label: str, model_name: str, pk: object, text: object) -> str:
    """A link to a change page named by app label and model, for rows of an app this one may not import."""
    return linked(text, _url(f"admin:{app_label}_{model_name}_change", pk))


def change_link(model: type[models.Model], pk: object, text: object = None) -> SafeString:
    """A link to the change page of `model`'s row `pk` (the pk itself unless `text`), without reading the row."""
    return linked(pk if text is None else text, change_url(model, pk))


def linked_ids(model: type[models.Model], pks: list[Any], limit: int = 20) -> SafeString:
    """Ids as links to their change pages: "15, 16 and 3 more"."""
    links = format_html_join(", ", "{}", ((change_link(model, pk),) for pk in pks[:limit]))
    return format_html("{}{}", links, f" and {len(pks) - limit} more" if len(pks) > limit else "")


def changelist_url(model: type[models.Model], **filters: object) -> str | None:
    """The URL of `model`'s admin list filtered by `filters` (e.g. status__exact="failed"), or None."""
    meta = model._meta
    url = _url(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    if url is None or not filters:
        return url
    return f"{url}?{urlencode({k: str(v) for k, v in filters.items()})}"


def changelist_link(model: type[models.Model], text: object, **filters: object) -> str:
    """A link to `model`'s admin list, filtered by `filters` (e.g. supplier__id__exact=3)."""
    return linked(text, changelist_url(model, **filters))


def change_url(model: type[models.Model], pk: object) -> str | None:
    meta = model._meta
    return _url(f"admin:{meta.app_label}_{meta.model_name}_change", pk)


def _url(name: str, *args: object) -> str | None:
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


def key_values(data: Any, *, words: bool = False) -> str:
    """A JSON object as a two-column table; anything else as its text.

    As stored (a push payload's data: its keys are what the device reads), or with `words` as a person
    reads it (a step's output): "order id", "yes", "a, b".
    """
    if not data:
        return "—"
    if not isinstance(data, dict):
        return shown(str(data))
    cells = (((str(k).replace("_", " "), _plain(v)) if words else (str(k), _json(v))) for k, v in data.items())
    rows = format_html_join("", '<tr><th scope="row">{}</th><td>{}</td></tr>', ((shown(k), shown(v)) for k, v in cells))
    return format_html('<table class="weave-kv"><tbody>{}</tbody></table>', rows)


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_plain(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    return str(value)


def clipped(text: str, *, one_line: bool = False) -> str:
    """Text cut to two lines in a list cell (or one, for names and tokens), the whole of it in the title
    (hover) and on the row's page."""
    text = shown(text or "")
    if not text:
        return "—"
    kind = "weave-clip-line" if one_line else "weave-clip"
    return format_html('<span class="{}" title="{}">{}</span>', kind, text, text)


def state_word(value: str) -> str:
    """One wording for a state everywhere: the stored value ("lease_lost"), as the logs, the metrics'
    labels and `weave_explain` print it, never Django's generated label ("Lease Lost")."""
    return value or "—"


def joined_reason(prefix: str, reason: str) -> str:
    """`prefix: reason`, said once: words the reason repeats from the prefix are not said twice.

    "failed at step_x" + "step_x: account closed" -> "failed at step_x: account closed";
    "Lease lost at step_x" + "Lease lost on run 2 (...)" -> "Lease lost at step_x, on run 2 (...)".
    """
    reason, prefix = (reason or "").strip(), (prefix or "").strip().rstrip(":")
    if not reason or not prefix:
        return reason or prefix
    head, colon, rest = reason.partition(":")
    if colon and head.strip() and prefix.lower().endswith(head.strip().lower()):
        return f"{prefix}: {rest.strip()}"  # the reason starts by naming what the prefix already names
    said, words = prefix.lower().split(), reason.split()
    common = 0
    while common < min(len(said), len(words)) and said[common] == words[common].lower():
        common += 1
    if common >= 2:
        return f"{prefix}, {' '.join(words[common:])}"
    return f"{prefix}: {reason}"


def said_once(reason: str) -> str:
    """A stored reason with a doubled lead-in said once ("failed at x: x: closed" -> "failed at x: closed")."""
    head, sep, rest = (reason or "").partition(": ")
    return joined_reason(head, rest) if sep and rest else reason or ""


def known_secrets() -> list[str]:
    """The configured secrets: every key declared secret, and any userinfo in the configured service URLs."""
    return secret_values()


def shown(text: str) -> str:
    """Return `text` fit to show a person: decoded, NUL-free, secrets and credentials redacted."""
    return redact(decode(text).replace("\x00", "\ufffd"), known_secrets())

"""Checks for what callers hand to a public service: text and JSON, type and content.

Every check raises Django's `ValidationError` keyed by the field it names, before anything is
stored, so a bad argument never surfaces later as a `DataError` or `IntegrityError` (which would
also break the caller's transaction), an `AttributeError` or a `RecursionError`.

What PostgreSQL refuses or a provider cannot carry is refused here: NUL anywhere, lone surrogates
(not encodable as UTF-8), NaN and Infinity (not JSON), non-string object keys (JSON would silently
turn them into strings), and nesting deeper than `MAX_DEPTH`. Sizes are the UTF-8 bytes of the
compact JSON a client actually sends (`json_bytes`), never the ASCII-escaped form.
"""

import json
import math
from typing import Any

from django.core.exceptions import ValidationError

# Deep enough for any real payload, shallow enough that no walk or encoder ever recurses far.
MAX_DEPTH = 32
# C0 controls other than tab, newline and carriage return; DEL. A person's text never needs them.
_CONTROLS = frozenset(chr(c) for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F))


def _refuse(field: str, message: str) -> ValidationError:
    return ValidationError({field: message})


def _describe(value: Any) -> str:
    return type(value).__name__


def text_problem(value: str) -> str:
    """Return why `value` cannot be stored or sent as text ("" when it can)."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode text)"
    return ""


def check_text(
    value: Any,
    *,
    field: str,
    required: bool = False,
    max_chars: int | None = None,
    controls: bool = False,
    strip: bool = False,
    required_message: str = "",
    one_line: bool = False,
) -> str:
    """Return `value` if it is acceptable text for `field`; raise a `ValidationError` naming it otherwise.

    `controls=False` also refuses control characters other than tab and newlines; `one_line` refuses
    line breaks too; `strip` trims surrounding whitespace first; `required` refuses empty (or blank) text.
    """
    if not isinstance(value, str):
        raise _refuse(field, f"{field} must be text, not {_describe(value)}.")
    text: str = value
    if problem := text_problem(text):
        raise _refuse(field, f"{field} {problem}.")
    if not controls and any(c in _CONTROLS for c in text):
        raise _refuse(field, f"{field} contains a control character.")
    if one_line and any(c in "\n\r\u2028\u2029\x85" for c in text):
        raise _refuse(field, f"{field} must be one line.")
    if strip:
        text = text.strip()
    if required and not text.strip():
        raise _refuse(field, required_message or f"{field} is required.")
    if max_chars is not None and len(text) > max_chars:
        raise _refuse(field, f"{field} has at most {max_chars} characters ({len(text)} given).")
    return text


def check_json(value: Any, *, field: str, max_depth: int = MAX_DEPTH, object_only: bool = False) -> Any:
    """Return `value` if it is plain JSON that every database and provider accepts; raise otherwise.

    Walks iteratively, so absurd nesting is refused with a message instead of a `RecursionError`.
    """
    if object_only and not isinstance(value, dict):
        raise _refuse(field, f"{field} must be a JSON object, not {_describe(value)}.")
    stack: list[tuple[Any, int, str]] = [(value, 1, field)]
    while stack:
        item, depth, where = stack.pop()
        if depth > max_depth:
            raise _refuse(field, f"{field} is nested deeper than {max_depth} levels (at {where}).")
        stack.extend(_json_children(item, depth, where, field))
    return value


def _json_children(item: Any, depth: int, where: str, field: str) -> list[tuple[Any, int, str]]:
    """Check one JSON value (not what it holds) and return what it holds, one level deeper."""
    if item is None or isinstance(item, bool | int):
        return []
    if isinstance(item, float):
        if not math.isfinite(item):
            raise _refuse(field, f"{field} holds {item!r} at {where}: NaN and Infinity are not JSON.")
        return []
    if isinstance(item, str):
        if problem := text_problem(item):
            raise _refuse(field, f"{field} text at {where} {problem}.")
        return []
    if isinstance(item, dict):
        return [(child, depth + 1, f"{where}.{_short(_checked_key(key, where, field))}") for key, child in item.items()]
    if isinstance(item, list):
        return [(child, depth + 1, f"{where}[{index}]") for index, child in enumerate(item)]
    raise _refuse(field, f"{field} is not JSON-serialisable: it holds a {_describe(item)} at {where}.")


def _checked_key(key: Any, where: str, field: str) -> str:
    if not isinstance(key, str):
        raise _refuse(field, f"{field} keys must be text; {key!r} at {where} is {_describe(key)}.")
    if problem := text_problem(key):
        raise _refuse(field, f"{field} key at {where} {problem}.")
    return key


def check_ids(value: Any, *, field: str, most: int = 10_000) -> list[int]:
    """Return `value` as a list of integer primary keys; refuse text, booleans and anything else."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise _refuse(field, f"{field} must be a list of ids, not {_describe(value)}.")
    ids = list(value)
    if len(ids) > most:
        raise _refuse(field, f"{field} holds {len(ids)} ids; at most {most} at a time.")
    for item in ids:
        if isinstance(item, bool) or not isinstance(item, int):
            raise _refuse(field, f"{field} must hold integer ids; {item!r} is {_describe(item)}.")
    return ids


def json_bytes(value: Any) -> bytes:
    """Encode `value` the way httpx sends `json=`: compact separators, UTF-8, no ASCII escaping, no NaN."""
    return _COMPACT.encode(value).encode("utf-8")


# What json.dumps builds on every call given these options (it reuses an encoder only for the defaults).
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _short(key: str) -> str:
    return key if len(key) <= 40 else key[:39] + "…"


def parse_json_object(raw: bytes, *, field: str = "request") -> dict[str, Any]:
    """Parse a request body that must be one JSON object; raise a ValidationError naming `field` otherwise.

    Strict where `json.loads` is lenient or crashes: UTF-8 only (no BOM, no UTF-16), no duplicate keys
    (which one wins is a guess), no NaN or Infinity, no number too large for a float, and nesting no
    deeper than MAX_DEPTH (a deeply nested body is refused, never a RecursionError). The value then
    passes `check_json`: no NUL, no lone surrogate, text keys only."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(field, f"The {field} body must be UTF-8 JSON ({exc.reason} at byte {exc.start}).") from exc
    if text.startswith("\ufeff"):
        raise _refuse(field, f"The {field} body must be UTF-8 JSON without a byte order mark.")
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError as exc:
        raise _refuse(field, f"The {field} body is nested deeper than {MAX_DEPTH} levels.") from exc
    except ValueError as exc:  # JSONDecodeError, and ours below
        raise _refuse(field, f"The {field} body must be one JSON object: {exc}.") from exc
    if not isinstance(value, dict):
        raise _refuse(field, f"The {field} body must be one JSON object, not {_describe(value)}.")
    result: dict[str, Any] = check_json(value, field=field)
    return result


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {_short(twice)!r} appears twice")
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]}… is too large")
    return value

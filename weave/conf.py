"""The `WEAVE` settings dict: one typed key per setting, with its default, type and allowed range.

Values are read on every attribute access, never cached at import, so a test that changes
`settings.WEAVE` (pytest-django's `settings` fixture) is seen at once. The system check `weave.E006`
(`weave/checks.py`) validates every key's type and range with `Key.problem()`; `weave.E005` refuses
unknown keys.

The core declares only its own keys (`WeaveSettings`). An app declares its keys in a subclass of
`SettingsGroup`, next to its job type:

    class PushSettings(SettingsGroup):
        PUSH_TIMEOUT = seconds(10.0, "per request")

Defining the class is what declares the keys (to the checks, `KEYS`, `DEFAULTS` and
`weave_settings.PUSH_TIMEOUT`), so the core never names an app's settings.
"""

import math
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar, overload
from urllib.parse import urlsplit

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "DEFAULTS",
    "KEYS",
    "Key",
    "SettingsGroup",
    "WeaveSettings",
    "count",
    "dotted_paths",
    "flag",
    "lease_ttl",
    "mapping_or_none",
    "seconds",
    "seconds_or_none",
    "setting",
    "text",
    "weave_settings",
]

T = TypeVar("T")


def _overrides() -> Mapping[str, Any]:
    overrides = getattr(django_settings, "WEAVE", None) or {}
    return overrides if isinstance(overrides, Mapping) else {}


class Key(Generic[T]):
    """One `WEAVE` key: a data descriptor on `WeaveSettings` that reads the site's value or the default."""

    def __init__(
        self,
        default: T,
        doc: str,
        *,
        kind: type,
        optional: bool = False,
        minimum: float | None = None,
        above: float | None = None,
        fallback: "Key[T] | None" = None,
        secret: bool = False,
        url: bool = False,
    ) -> None:
        self.default = default
        self.doc = doc
        self.kind = kind  # float, int or str; a float key also takes an int
        self.optional = optional  # None is allowed (and means what `doc` says)
        self.minimum = minimum  # inclusive lower bound for numbers
        self.above = above  # exclusive lower bound for numbers
        self.fallback = fallback  # when the site does not set this key, use that key's value
        # A credential (a token, or a URL that may carry userinfo): screens redact its value.
        self.secret = secret
        self.url = url  # a URL whose userinfo (user:password@) is a credential
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> "Key[T]": ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: object | None, owner: type) -> "Key[T] | T":
        if instance is None:
            return self
        return self.read(_overrides())

    def read(self, overrides: Mapping[str, Any]) -> T:
        if self.name in overrides:
            value: T = overrides[self.name]
            return value
        if self.fallback is not None:
            return self.fallback.read(overrides)
        return self.default

    def problem(self, value: object) -> str | None:
        """Say what is wrong with `value` for this key, or None if it is allowed."""
        if value is None:
            return None if self.optional else f"must be {self.expected()}, not None"
        if not self._of_kind(value):
            return f"must be {self.expected()}, not {type(value).__name__}"
        if self.kind in (float, int) and isinstance(value, (int, float)):
            return self._range_problem(value)
        return None

    def _of_kind(self, value: object) -> bool:
        if self.kind is dict:
            return isinstance(value, Mapping)
        if self.kind in (str, bool):
            return isinstance(value, self.kind)
        if self.kind is tuple:
            return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
        numeric = (int, float) if self.kind is float else (int,)
        return isinstance(value, numeric) and not isinstance(value, bool)  # True is an int, never a count

    def _range_problem(self, value: float) -> str | None:
        if not math.isfinite(value):
            return f"must be {self.expected()}, not {value!r}"
        too_low = self.minimum is not None and value < self.minimum
        if too_low or (self.above is not None and value <= self.above):
            return f"must be {self.expected()}"
        return None

    def expected(self) -> str:
        what = {
            float: "a number",
            int: "a whole number",
            str: "a string",
            bool: "True or False",
            tuple: "a list of strings",
            dict: "a dict",
        }[self.kind]
        if self.above is not None:
            what += f" above {self.above:g}"
        elif self.minimum is not None:
            what += f" of at least {self.minimum:g}"
        return f"{what} or None" if self.optional else what


# --- the kinds of key (each returns a `Key` typed for mypy) --------------------------------------


def seconds(default: float, doc: str, *, above: float | None = 0.0, minimum: float | None = None) -> Key[float]:
    """A duration in seconds; by default it must be above zero."""
    return Key(default, doc, kind=float, above=None if minimum is not None else above, minimum=minimum)


def seconds_or_none(doc: str) -> Key[float | None]:
    """A duration in seconds above zero, or None (the key's `doc` says what None means)."""
    return Key[float | None](None, doc, kind=float, optional=True, above=0.0)


def lease_ttl(doc: str, *, fallback: Key[float]) -> Key[float]:
    """A lease TTL in seconds above zero; unset, it is the `fallback` key's value."""
    return Key(fallback.default, doc, kind=float, above=0.0, fallback=fallback)


def count(default: int, doc: str, *, minimum: int = 1) -> Key[int]:
    """A whole number, at least `minimum`."""
    return Key(default, doc, kind=int, minimum=minimum)


def flag(default: bool, doc: str) -> Key[bool]:
    """True or False."""
    return Key(default, doc, kind=bool)


def mapping_or_none(doc: str) -> Key[Mapping[str, Any] | None]:
    """A dict (its app checks the contents), or None (the key's `doc` says what None means)."""
    return Key[Mapping[str, Any] | None](None, doc, kind=dict, optional=True)


def text(default: str, doc: str, *, secret: bool = False, url: bool = False) -> Key[str]:
    """A string (URLs are checked by the app that uses them).

    `secret`: the value is a credential, redacted wherever shown; `url`: a URL whose userinfo is.
    """
    return Key(default, doc, kind=str, secret=secret, url=url)


def dotted_paths(default: tuple[str, ...], doc: str) -> Key[tuple[str, ...]]:
    """A list (or tuple) of dotted import paths; what they must name is checked by the app that loads them."""
    return Key(default, doc, kind=tuple)


class SettingsGroup:
    """A typed, read-through view of some `WEAVE` keys: one `Key` attribute per setting.

    Every subclass declares its keys when it is defined: the checks validate them, `weave.E005`
    accepts them and `weave_settings` reads them by name. Names are global to `WEAVE`: a key
    declared twice by different groups is a programming error.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, key in cls.keys().items():
            known = _declared.get(name)
            if known is not None and known is not key and not _same_place(known, key):
                raise ImproperlyConfigured(f"WEAVE key {name} is declared twice ({cls.__module__}.{cls.__qualname__}).")
            _declared[name] = key

    @classmethod
    def keys(cls) -> dict[str, Key[Any]]:
        """This group's keys, by name, in declaration order."""
        found: dict[str, Key[Any]] = {}
        for klass in reversed(cls.__mro__):
            found.update({name: value for name, value in vars(klass).items() if isinstance(value, Key)})
        return found

    def valid(self, *names: str) -> bool:
        """Whether the named keys all hold allowed values (checks that compare keys skip otherwise: E006 reports)."""
        overrides = _overrides()
        return all(KEYS[name].problem(KEYS[name].read(overrides)) is None for name in names)


def _same_place(a: Key[Any], b: Key[Any]) -> bool:
    # A module imported twice (a test reloading an app's declarations) redefines the same key.
    return (a.name, a.doc, a.kind, a.default) == (b.name, b.doc, b.kind, b.default)


_declared: dict[str, Key[Any]] = {}


class _Keys(Mapping[str, Key[Any]]):
    """Every declared key, the core's and the apps', looked up when asked (apps declare theirs on import)."""

    def __getitem__(self, name: str) -> Key[Any]:
        return _declared[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(_declared))

    def __len__(self) -> int:
        return len(_declared)


class _Defaults(Mapping[str, Any]):
    def __getitem__(self, name: str) -> Any:
        return _declared[name].default

    def __iter__(self) -> Iterator[str]:
        return iter(list(_declared))

    def __len__(self) -> int:
        return len(_declared)


KEYS: Mapping[str, Key[Any]] = _Keys()
DEFAULTS: Mapping[str, Any] = _Defaults()


def setting(name: str) -> Any:
    """The site's value (or the default) of the declared key `name`."""
    return KEYS[name].read(_overrides())


def secret_values() -> list[str]:
    """The configured credentials: every `secret` key's value and the userinfo of every `url` key's value."""
    overrides = _overrides()
    found: list[str] = []
    for key in KEYS.values():
        value = key.read(overrides) if key.secret or key.url else None
        if key.secret:
            found.append(str(value or ""))
        if key.url:
            try:
                parts = urlsplit(str(value or ""))
            except ValueError:
                continue
            found += [parts.password or "", parts.username or ""]
    return [secret for secret in found if secret]


class WeaveSettings(SettingsGroup):
    """Read-through, typed view of `settings.WEAVE`: the core's keys, and any app's key by name."""

    # --- leases (seconds) ---
    LEASE_TTL = seconds(30.0, "lease TTL of any job whose own *_LEASE_TTL is not set")
    HEARTBEAT_INTERVAL = seconds_or_none(
        # A TTL shorter than three intervals leaves no room for one late renewal (weave.E010).
        "seconds between heartbeat renewals; None means a third of the lease TTL"
    )
    # --- worker database sessions (a worker cut off from PostgreSQL mid-transaction) ---
    # Applied only to PostgreSQL connections opened in django-q2 worker processes (weave/worker_db.py),
    # never to the site's web requests. 0 disables a limit; weave.W020/W021 warn when a limit is missing
    # or not below the lease TTLs.
    WORKER_DB_LIMITS = flag(True, "give worker processes' sessions the WORKER_DB_* limits; False leaves them as is")
    WORKER_DB_STATEMENT_TIMEOUT = seconds(10.0, "the server cancels a worker's statement running longer", minimum=0.0)
    WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT = seconds(
        10.0, "the server ends a worker session idle this long inside a transaction", minimum=0.0
    )
    WORKER_DB_CONNECT_TIMEOUT = count(5, "whole seconds a worker's (re)connect may take (libpq; at least 2)", minimum=0)
    WORKER_DB_KEEPALIVES_IDLE = count(5, "whole seconds of silence before the first TCP keepalive probe", minimum=0)
    WORKER_DB_KEEPALIVES_INTERVAL = count(2, "whole seconds between TCP keepalive probes", minimum=0)
    WORKER_DB_KEEPALIVES_COUNT = count(3, "unanswered keepalive probes that drop the connection", minimum=0)
    WORKER_DB_TCP_USER_TIMEOUT = seconds(
        10.0, "sent data unacknowledged this long drops the connection (both ends)", minimum=0.0
    )
    # --- operator console ---
    METRICS_TOKEN = text("", "bearer token for the Prometheus endpoint (weave.urls); empty: staff sessions only")
    DASHBOARD_REFRESH = count(10, "seconds between the dashboard's automatic reloads; 0 turns it off", minimum=0)
    # --- waking workers for due work (weave.wake) ---
    WAKE_WATCHER = flag(True, "run a due-time watcher thread in every django-q2 worker process")
    WAKE_LISTEN_DB = text(
        "", "database alias or DSN of a direct session connection the watchers LISTEN on; empty: 'default'"
    )
    WAKE_LINGER = seconds(
        2.0,
        "a drain with nothing left keeps looking for new rows this long, its request slot taken; 0: end at once",
        minimum=0.0,
    )
    # --- retention (weave.retention) ---
    RETENTION = mapping_or_none(
        "days each kind of finished history is kept, e.g. {'attempts': 14, 'runs': None}; None or kinds not "
        "named: weave.retention.DEFAULT_RETENTION (None as a value keeps that kind forever)"
    )
    RETENTION_BATCH = count(1000, "rows deleted per purge transaction")
    RETENTION_BUDGET = seconds(240.0, "seconds one purge run may delete for; the next run resumes")
    RETENTION_LEASE_TTL = seconds(60.0, "lease TTL of the purge job, renewed by every batch")
    RETENTION_EVERY = count(15, "minutes between scheduled purge runs")

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not the core's own: an app's declared key.
        key = _declared.get(name)
        if key is None:
            raise AttributeError(f"WEAVE has no setting {name!r} (no installed app declares it).")
        return key.read(_overrides())

    def unknown_keys(self) -> list[str]:
        return sorted(set(_overrides()) - set(KEYS) - set(RETIRED))

    def retired_keys(self) -> list[str]:
        """Keys the site still sets that Weave no longer reads (accepted, ignored; a check warns)."""
        return sorted(set(_overrides()) & set(RETIRED))

    def problems(self) -> list[tuple[str, object, str]]:
        """Return (key, value, what is wrong) for every key the site set to a value of the wrong type or range."""
        overrides = _overrides()
        found = []
        for name, key in KEYS.items():
            if name in overrides and (problem := key.problem(overrides[name])) is not None:
                found.append((name, overrides[name], problem))
        return found


# Settings that became fixed timings (`weave.wake`): a site that still sets them keeps working.
RETIRED = {
    "WAKE_HOLD": "a lost task's request lapses after weave.wake.REQUEST_LAPSE (3 s)",
    "WAKE_GRACE": "fixed at 0.2 s",
    "WAKE_POLL_MAX": "fixed at 1 s",
    "WAKE_IDLE": "fixed at 30 s",
    "WAKE_PROBE_TIMEOUT": "fixed at 2 s",
}

weave_settings = WeaveSettings()

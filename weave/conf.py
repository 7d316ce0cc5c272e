"""The `WEAVE` settings dict: one typed key per setting, with its default, type and allowed range.

Values are read on every attribute access, never cached at import, so a test that changes
`settings.WEAVE` (pytest-django's `settings` fixture) is seen at once. The system check `weave.E006`
(`weave/checks.py`) validates every key's type and range with `Key.problem()`; `weave.E005` refuses
unknown keys.

Adding a setting is one line in `WeaveSettings` below: `NAME = seconds(10.0, "what it is for")`
(or `count`, `text`, ...). The default, the type mypy sees, the check and `DEFAULTS` all follow from it.
"""

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from django.conf import settings as django_settings

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
    ) -> None:
        self.default = default
        self.doc = doc
        self.kind = kind  # float, int or str; a float key also takes an int
        self.optional = optional  # None is allowed (and means what `doc` says)
        self.minimum = minimum  # inclusive lower bound for numbers
        self.above = above  # exclusive lower bound for numbers
        self.fallback = fallback  # when the site does not set this key, use that key's value
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
        if self.kind is dict:
            return None if isinstance(value, Mapping) else f"must be {self.expected()}, not {type(value).__name__}"
        if self.kind in (str, bool):
            fits = isinstance(value, self.kind)
            return None if fits else f"must be {self.expected()}, not {type(value).__name__}"
        if self.kind is tuple:
            strings = isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
            return None if strings else f"must be {self.expected()}, not {type(value).__name__}"
        numeric = (int, float) if self.kind is float else (int,)
        if isinstance(value, bool) or not isinstance(value, numeric):
            return f"must be {self.expected()}, not {type(value).__name__}"
        if not math.isfinite(value):
            return f"must be {self.expected()}, not {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"must be {self.expected()}"
        if self.above is not None and value <= self.above:
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


def text(default: str, doc: str) -> Key[str]:
    """A string (URLs are checked by the app that uses them)."""
    return Key(default, doc, kind=str)


def dotted_paths(default: tuple[str, ...], doc: str) -> Key[tuple[str, ...]]:
    """A list (or tuple) of dotted import paths; what they must name is checked by the app that loads them."""
    return Key(default, doc, kind=tuple)


class WeaveSettings:
    """Read-through, typed view of `settings.WEAVE`: one attribute per key."""

    # --- leases (seconds) ---
    LEASE_TTL = seconds(30.0, "lease TTL of any job whose own *_LEASE_TTL is not set")
    HEARTBEAT_INTERVAL = seconds_or_none(
        # A TTL shorter than three intervals leaves no room for one late renewal (weave.E010).
        "seconds between heartbeat renewals; None means a third of the lease TTL"
    )
    # --- worker database sessions (issue 17: a worker cut off from PostgreSQL mid-transaction) ---
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
    # --- push notifications ---
    PUSH_BACKENDS = mapping_or_none(
        'alias -> {"BACKEND": dotted path, "OPTIONS": {...}}, like STORAGES; None: one "default" webhook '
        "built from PUSH_URL / PUSH_TOKEN (notifications.backends.registry)"
    )
    PUSH_URL = text("", "the default webhook's endpoint; each message is a JSON POST")
    PUSH_TOKEN = text("", "sent as Authorization: Bearer ...")
    PUSH_TIMEOUT = seconds(10.0, "per request: connect, send, headers and the whole body together")
    PUSH_BATCH_SIZE = count(100, "rows claimed under one lease")
    PUSH_CONCURRENCY = count(20, "requests in flight per worker")
    PUSH_BUDGET = seconds(60.0, "seconds a drain may start new rows; must stay below Q_CLUSTER timeout")
    PUSH_LEASE_TTL = lease_ttl("lease TTL of a batch of notifications", fallback=LEASE_TTL)
    PUSH_MAX_ATTEMPTS = count(5, "attempts before a notification is failed")
    PUSH_BACKOFF_BASE = seconds(2.0, "first retry delay; doubled per attempt, with jitter", minimum=0.0)
    PUSH_BACKOFF_MAX = seconds(3600.0, "cap on the retry delay", minimum=0.0)
    PUSH_MAX_PAYLOAD_BYTES = count(4096, "largest JSON payload a notification may carry")
    PUSH_BREAKER_THRESHOLD = count(5, "consecutive systemic failures (5xx, 429, unreachable) that stop a batch")
    PUSH_BREAKER_COOLDOWN = seconds(30.0, "how long rows released by the breaker wait", minimum=0.0)
    PUSH_API_RATE = count(30, "device API requests one user may make per minute (notifications.urls)")
    PUSH_API_AUTHENTICATE = text(
        "", "dotted path of a callable(request) -> user or None for the device API (token auth); empty: sessions"
    )
    PUSH_API_PERMISSION = text("", "dotted path of a callable(request, user) -> bool; empty: any active user")
    # --- operator console ---
    METRICS_TOKEN = text("", "bearer token for the Prometheus endpoint (weave.urls); empty: staff sessions only")
    DASHBOARD_REFRESH = count(10, "seconds between the dashboard's automatic reloads; 0 turns it off", minimum=0)
    # --- waking workers for due work (weave.wake) ---
    WAKE_WATCHER = flag(True, "run a due-time watcher thread in every django-q2 worker process")
    WAKE_HOLD = seconds(10.0, "how long a queued task holds its request slot if it never starts", minimum=0.0)
    WAKE_GRACE = seconds(0.2, "how long work found due after a notification is left to the task that sent it")
    WAKE_POLL_MAX = seconds(1.0, "longest poll on SQLite, and the longest backoff while work stays overdue")
    WAKE_IDLE = seconds(30.0, "longest LISTEN on PostgreSQL with nothing due (NOTIFY wakes it sooner)")
    # --- supplier onboarding ---
    SUPPLIER_API_URL = text("", "base URL of the supplier services")
    SUPPLIER_API_TIMEOUT = seconds(10.0, "per request")
    ONBOARDING_LEASE_TTL = lease_ttl("lease TTL of an onboarding run", fallback=LEASE_TTL)
    ONBOARDING_BUDGET = seconds(90.0, "seconds one attempt may work; below Q_CLUSTER timeout")
    ONBOARDING_STEP_RETRIES = count(3, "temporary failures retried within a step", minimum=0)
    ONBOARDING_RETRY_BACKOFF = seconds(0.5, "seconds before the first retry in a step, doubled per retry", minimum=0.0)
    ONBOARDING_RETRY_AFTER_MAX = seconds(30.0, "a longer Retry-After is capped to this", minimum=0.0)
    ONBOARDING_RELEASE_BACKOFF = seconds(
        2.0, "a run released on a temporary failure is due again after this, doubled per release, with jitter"
    )
    ONBOARDING_RELEASE_BACKOFF_MAX = seconds(300.0, "cap on the release backoff")
    # A run records the list when it starts, so changing it never reshapes runs in flight; the
    # system check onboarding.E003 loads it (README "Write your own step").
    ONBOARDING_STEPS = dotted_paths(
        (
            "onboarding.steps.builtin.verify_tax_id",
            "onboarding.steps.builtin.screen_sanctions",
            "onboarding.steps.builtin.create_vendor_record",
            "onboarding.steps.builtin.set_payment_terms",
            "onboarding.steps.builtin.register_bank_account",
            "onboarding.steps.builtin.send_welcome_notification",
        ),
        "the onboarding plan: dotted paths of the steps a new run takes, in order",
    )

    @classmethod
    def keys(cls) -> dict[str, Key[Any]]:
        """Every key, by name, in declaration order."""
        return {name: value for name, value in vars(cls).items() if isinstance(value, Key)}

    def unknown_keys(self) -> list[str]:
        return sorted(set(_overrides()) - set(self.keys()))

    def valid(self, *names: str) -> bool:
        """Whether the named keys all hold allowed values (checks that compare keys skip otherwise: E006 reports)."""
        keys, overrides = self.keys(), _overrides()
        return all(keys[name].problem(keys[name].read(overrides)) is None for name in names)

    def problems(self) -> list[tuple[str, object, str]]:
        """Return (key, value, what is wrong) for every key the site set to a value of the wrong type or range."""
        overrides = _overrides()
        found = []
        for name, key in self.keys().items():
            if name in overrides and (problem := key.problem(overrides[name])) is not None:
                found.append((name, overrides[name], problem))
        return found


KEYS: Mapping[str, Key[Any]] = MappingProxyType(WeaveSettings.keys())
DEFAULTS: Mapping[str, Any] = MappingProxyType({name: key.default for name, key in KEYS.items()})

weave_settings = WeaveSettings()

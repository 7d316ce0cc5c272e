"""A task's Weave options: how often it may be attempted, its backoff, its timeout and its lease TTL.

Each comes from the task itself (`@task(timeout=600)`, or `.using(timeout=600)`), else from the
backend's `OPTIONS` in `TASKS`, else from the default below. Pure policy: no database here.

    TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend", "OPTIONS": {"TIMEOUT": 300}}}
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from weave.jobs import Fail, RetryPolicy
from weave.wording import plural

# The option names, as a task gives them, with their backend OPTIONS key and default.
DEFAULTS: dict[str, Any] = {
    "max_attempts": 3,  # attempts in all, each start counted (a takeover after a lost lease too)
    "backoff": 2.0,  # seconds before the first retry of a listed error; doubled each time, capped at 300 s
    "retry_on": (),  # exception classes (or their dotted paths) retried; any other error fails the task
    "timeout": 60.0,  # seconds one attempt may run: renewed up to it, failed past it
    "lease_ttl": None,  # seconds; None: WEAVE["LEASE_TTL"]
}
NAMES = tuple(DEFAULTS)
BACKOFF_MAX = 300.0


class TaskTimedOut(Exception):  # noqa: N818  (named for what happened, as Django names TaskResultStatus)
    """The task's function returned (or raised) after its timeout: the attempt failed."""


class TaskCancelled(Exception):  # noqa: N818
    """An operator cancelled the task before it succeeded: it does not run again.

    Django's tasks framework has no cancelled status, so a cancelled task reads back `FAILED`, with
    this as its last error so that the failure has a reason.
    """


class TooManyAttempts(Fail):  # noqa: N818
    """A takeover would start the task more often than `max_attempts`: it failed without running again."""


def option_key(name: str) -> str:
    """The backend `OPTIONS` key of task option `name` (`max_attempts` -> `MAX_ATTEMPTS`)."""
    return name.upper()


def validate(options: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Return `options` (task option names) checked and as stored (JSON); raise `ImproperlyConfigured` if wrong."""
    unknown = sorted(set(options) - set(NAMES))
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown task {plural(len(unknown), 'option{}')} {', '.join(unknown)}; known: {', '.join(NAMES)}."
        )
    checked: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name == "retry_on":
            checked[name] = [_dotted(item, where) for item in value]
        elif name == "max_attempts":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ImproperlyConfigured(f"{where}: max_attempts must be a whole number from 1, not {value!r}.")
            checked[name] = value
        else:
            checked[name] = _seconds(name, value, where)
    return checked


def options_key(stored: Mapping[str, Any]) -> str:
    """A hashable key of stored options (as `validate` returns them), for caches of what they resolve to."""
    return json.dumps(stored, sort_keys=True) if stored else ""


def _seconds(name: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ImproperlyConfigured(f"{where}: {name} must be a number of seconds above 0, not {value!r}.")
    return float(value)


def _dotted(item: Any, where: str) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, type) and issubclass(item, BaseException):
        return f"{item.__module__}.{item.__qualname__}"
    raise ImproperlyConfigured(f"{where}: retry_on takes exception classes or their dotted paths, not {item!r}.")


@dataclass(frozen=True)
class TaskOptions:
    """The options one task runs with, every one resolved (see `resolve`)."""

    max_attempts: int
    backoff: float
    retry_on: tuple[str, ...]
    timeout: float
    lease_ttl: float | None

    def policy(self) -> "TaskRetryPolicy":
        return TaskRetryPolicy(max_attempts=self.max_attempts, backoff=self.backoff, retry_on=self.retry_on)


def backend_options(params: Mapping[str, Any], *, alias: str) -> dict[str, Any]:
    """The task options a backend's `OPTIONS` set, by task option name (checked)."""
    raw = params.get("OPTIONS", {}) or {}
    keys = {option_key(name): name for name in NAMES}
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}]['OPTIONS']: unknown {plural(len(unknown), 'key{}')} {', '.join(unknown)};"
            f" known: {', '.join(keys)}."
        )
    return validate({keys[key]: value for key, value in raw.items()}, where=f"TASKS[{alias!r}]['OPTIONS']")


def resolve(stored: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> TaskOptions:
    """The options of a task stored with `stored`, the backend's `defaults` filling what it left out."""
    merged = {**DEFAULTS, **(defaults or {}), **stored}
    return TaskOptions(
        max_attempts=int(merged["max_attempts"]),
        backoff=float(merged["backoff"]),
        retry_on=tuple(merged["retry_on"]),
        timeout=float(merged["timeout"]),
        lease_ttl=None if merged["lease_ttl"] is None else float(merged["lease_ttl"]),
    )


@dataclass(frozen=True)
class TaskRetryPolicy(RetryPolicy):
    """A task that raises has failed (Django's own rule), unless its error is one of `retry_on`.

    A listed error is retried after `backoff` * 2**(n-1) seconds while attempts remain.
    """

    retry_on: tuple[str, ...] = ()
    backoff_max: float = BACKOFF_MAX

    def retry_in(self, attempt: int, error: BaseException) -> float | None:
        if not _matches(error, self.retry_on):
            return None
        return super().retry_in(attempt, error)

    def why_final(self, attempt: int, error: BaseException, *, what: str = "attempt") -> str:
        # A timeout's or a cancel's own words say why the task ended; only a listed error is ever retried.
        if isinstance(error, (TaskTimedOut, TaskCancelled)):
            return ""
        if _matches(error, self.retry_on):
            return super().why_final(attempt, error, what=what)
        listed = f"retry_on ({', '.join(self.retry_on)})" if self.retry_on else "retry_on (empty)"
        return f"Not retried: {type(error).__name__} is not in the task's {listed}; a task that raises has failed."


def _matches(error: BaseException, paths: Iterable[str]) -> bool:
    for path in paths:
        try:
            cls = import_string(path)
        except ImportError:
            continue  # a class that is gone retries nothing; the task fails as Django's would
        if isinstance(cls, type) and isinstance(error, cls):
            return True
    return False

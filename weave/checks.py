"""System checks that stop `manage.py check` (and every command) on an unsafe configuration."""

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from weave.conf import KEYS, weave_settings
from weave.jobs import ttl_settings


@register(Tags.compatibility)
def check_q_cluster(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a Q_CLUSTER that lets django-q2 run one task twice at once, or forever."""
    conf = getattr(settings, "Q_CLUSTER", None)
    if not isinstance(conf, dict):
        return [
            Error(
                "Q_CLUSTER is missing or is not a dict.",
                hint="Weave needs django-q2 configured; see the README section 'Add to an existing site'.",
                id="weave.E001",
            )
        ]
    errors: list[Error] = []
    timeout = conf.get("timeout")
    retry = conf.get("retry", 60)  # django-q2's own default
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        errors.append(
            Error(
                f"Q_CLUSTER['timeout'] is {timeout!r}: a hung task would hold its worker forever.",
                hint="Set a positive timeout in seconds, e.g. 120.",
                id="weave.E002",
            )
        )
    elif not isinstance(retry, (int, float)) or retry <= timeout:
        errors.append(
            Error(
                f"Q_CLUSTER['retry'] ({retry!r}) must be greater than 'timeout' ({timeout!r}): the ORM broker "
                "hands a task to a second worker once it is 'retry' seconds old, while the first may still run it.",
                hint="Set retry comfortably above timeout, e.g. timeout=120, retry=300.",
                id="weave.E003",
            )
        )
    attempts = conf.get("max_attempts", 0)  # django-q2 treats 0 as unlimited
    if not isinstance(attempts, int) or attempts <= 0:
        errors.append(
            Error(
                f"Q_CLUSTER['max_attempts'] is {attempts!r}: a task that always fails would be re-run forever.",
                hint="Set max_attempts to a small positive number, e.g. 3.",
                id="weave.E004",
            )
        )
    return errors


@register(Tags.compatibility)
def check_weave_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse WEAVE keys that do not exist (a typo would silently fall back to a default) and values
    of the wrong type or out of range."""
    raw = getattr(settings, "WEAVE", None)
    if raw is not None and not isinstance(raw, Mapping):
        return [
            Error(
                f"WEAVE is a {type(raw).__name__}; it must be a dict of settings.",
                hint="See weave/conf.py for the settings and their defaults.",
                id="weave.E006",
            )
        ]
    errors: list[Error] = []
    unknown = weave_settings.unknown_keys()
    if unknown:
        errors.append(
            Error(
                f"Unknown WEAVE setting(s): {', '.join(unknown)}.",
                hint="The core's settings are in weave/conf.py; each app declares its own next to its job type.",
                id="weave.E005",
            )
        )
    for name, value, problem in weave_settings.problems():
        errors.append(
            Error(
                f"WEAVE['{name}'] is {value!r}; it {problem}.",
                hint=f"{name}: {KEYS[name].doc} (default {KEYS[name].default!r}).",
                id="weave.E006",
            )
        )
    return errors


@register(Tags.compatibility)
def check_lease_ttls(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse lease TTLs that heartbeats cannot keep alive (the core's and every registered job type's)."""
    errors: list[Error] = []
    interval = weave_settings.HEARTBEAT_INTERVAL
    for key in ttl_settings():
        if not weave_settings.valid("HEARTBEAT_INTERVAL", key):
            continue  # weave.E006 reports a value of the wrong type or range
        ttl = getattr(weave_settings, key)
        if interval is not None and ttl < 3 * interval:
            errors.append(
                Error(
                    f"WEAVE['{key}'] ({ttl} s) is shorter than three heartbeat intervals "
                    f"(HEARTBEAT_INTERVAL={interval} s): one late renewal would lose the lease mid-work.",
                    hint="Raise the TTL or lower HEARTBEAT_INTERVAL (or leave it None for ttl/3).",
                    id="weave.E010",
                )
            )
    return errors


@register(Tags.database)
def check_sqlite_in_production(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn when SQLite carries a production site with several workers."""
    engine = settings.DATABASES.get("default", {}).get("ENGINE", "")
    workers = (getattr(settings, "Q_CLUSTER", None) or {}).get("workers", 1)
    if "sqlite" in engine and not settings.DEBUG and (workers or 1) > 1:
        return [
            Warning(
                f"SQLite with DEBUG off and {workers} django-q2 workers per cluster: every lease write takes the "
                "single database write lock, so several workers or clusters queue behind each other.",
                hint="Use PostgreSQL in production; SQLite is meant for local runs and the demo.",
                id="weave.W013",
            )
        ]
    return []


_WORKER_DB_KEYS = (
    "WORKER_DB_STATEMENT_TIMEOUT",
    "WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT",
    "WORKER_DB_CONNECT_TIMEOUT",
    "WORKER_DB_KEEPALIVES_IDLE",
    "WORKER_DB_KEEPALIVES_INTERVAL",
    "WORKER_DB_KEEPALIVES_COUNT",
    "WORKER_DB_TCP_USER_TIMEOUT",
)


@register(Tags.database)
def check_worker_db_limits(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn when workers' PostgreSQL sessions could outlive a lease after a network partition."""
    if not any(d.get("ENGINE", "").endswith("postgresql") for d in settings.DATABASES.values()):
        return []
    hint = (
        "Set the WEAVE WORKER_DB_* settings (see README 'Network partitions'): a worker cut off mid-transaction "
        "keeps its row locks until the server gives up on its session."
    )
    if not weave_settings.valid("WORKER_DB_LIMITS", *_WORKER_DB_KEYS):
        return []  # weave.E006 names the bad value
    if not weave_settings.WORKER_DB_LIMITS:
        return [
            Warning(
                "WEAVE['WORKER_DB_LIMITS'] is off: worker connections to PostgreSQL run without statement, "
                "idle-in-transaction, keepalive and TCP user timeouts, so a partitioned worker can hold its jobs' "
                "row locks for hours.",
                hint=hint,
                id="weave.W020",
            )
        ]
    ttls = [getattr(weave_settings, k) for k in ttl_settings()]
    shortest = min((t for t in ttls if isinstance(t, (int, float)) and t > 0), default=None)
    warnings: list[Warning] = []
    for key in _WORKER_DB_KEYS:
        value = getattr(weave_settings, key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            warnings.append(
                Warning(
                    f"WEAVE['{key}'] is {value!r}: worker connections lack this limit (0 or less disables it).",
                    hint=hint,
                    id="weave.W020",
                )
            )
    if warnings or shortest is None:
        return warnings
    dead_link = (
        weave_settings.WORKER_DB_KEEPALIVES_IDLE
        + weave_settings.WORKER_DB_KEEPALIVES_INTERVAL * weave_settings.WORKER_DB_KEEPALIVES_COUNT
    )
    bounds = {
        "WORKER_DB_STATEMENT_TIMEOUT": weave_settings.WORKER_DB_STATEMENT_TIMEOUT,
        "WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT": weave_settings.WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT,
        "WORKER_DB_TCP_USER_TIMEOUT": weave_settings.WORKER_DB_TCP_USER_TIMEOUT,
        "WORKER_DB_CONNECT_TIMEOUT": weave_settings.WORKER_DB_CONNECT_TIMEOUT,
        "WORKER_DB_KEEPALIVES_IDLE + INTERVAL x COUNT": dead_link,
        # A statement cut off mid-way leaves an aborted transaction that still holds its locks until the
        # idle-in-transaction timeout ends the session: the two add up.
        "WORKER_DB_STATEMENT_TIMEOUT + IDLE_IN_TRANSACTION_TIMEOUT": weave_settings.WORKER_DB_STATEMENT_TIMEOUT
        + weave_settings.WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT,
    }
    for name, seconds in bounds.items():
        if seconds >= shortest:
            warnings.append(
                Warning(
                    f"WEAVE['{name}'] ({seconds:g} s) is not below the shortest lease TTL ({shortest:g} s): a worker "
                    "cut off from PostgreSQL could keep a job's row locked after its lease ran out, and hold the job "
                    "up to that long past the TTL.",
                    hint="Keep every WORKER_DB_* limit well below the lease TTLs (e.g. a third to a half of the TTL).",
                    id="weave.W021",
                )
            )
    return warnings


@register(Tags.database)
def check_ttl_fits_traffic(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn when a configured lease TTL is below what the last day's latencies need (weave.tuning).

    A database check: it runs with `manage.py check --database default` (and `migrate`), never on
    every command, and says nothing while the tables do not exist yet.
    """
    if not databases:
        return []
    from django.db import DatabaseError

    from weave.telemetry import ttl_reports

    try:
        reports = ttl_reports()
    except DatabaseError:
        return []  # tables not migrated yet: nothing to judge
    warnings = []
    for r in reports:
        if r.advice.too_short:
            warnings.append(
                Warning(
                    f"WEAVE['{r.setting}'] is {r.advice.configured:g} s, but recent {r.job} traffic "
                    f"({r.group_kind} {r.group}) needs {r.advice.needed:.0f} s: {r.advice.explain()}.",
                    hint="Raise the TTL (see `manage.py weave_tune` for the data), or find out why requests got slow.",
                    id="weave.W030",
                )
            )
    return warnings

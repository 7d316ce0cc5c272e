"""System checks that stop `manage.py check` (and every command) on an unsafe configuration."""

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from weave.conf import KEYS, RETIRED, weave_settings
from weave.jobs import job_types, ttl_settings
from weave.wording import plural


@register(Tags.compatibility)
def check_q_cluster(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a Q_CLUSTER that lets django-q2 run one task twice at once, or forever."""
    conf = getattr(settings, "Q_CLUSTER", None)
    if not isinstance(conf, dict):
        return [
            Error(
                "Q_CLUSTER is missing or is not a dict.",
                hint="Weave needs django-q2 configured; see docs/getting-started.md.",
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
def check_django_q_installed(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a site without django-q2's app: nothing would run what Weave enqueues."""
    from django.apps import apps

    if apps.is_installed("django_q"):
        return []
    return [
        Error(
            "django_q is not in INSTALLED_APPS: there is no qcluster command and no queue table, so the "
            "notifications, onboarding runs and jobs Weave stores are never worked on.",
            hint='Add "django_q" to INSTALLED_APPS (next to "weave"), then run manage.py migrate.',
            id="weave.E008",
        )
    ]


# Q_CLUSTER keys that choose one of django-q2's brokers; without any of them it uses Redis on localhost.
_BROKER_KEYS = ("orm", "redis", "django_redis", "sqs", "iron_mq", "mongo", "disque_nodes")
_ORM_HINT = (
    'Keep the queue in your database: Q_CLUSTER["orm"] = "default" with "broker_class": '
    '"weave.broker.DatabaseClockORM" (docs/getting-started.md shows the whole Q_CLUSTER).'
)


@register(Tags.compatibility)
def check_q_cluster_broker(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a Q_CLUSTER that names no broker (django-q2 then falls back to Redis on localhost without a
    word), or one on Redis without the redis package."""
    from importlib.util import find_spec

    from weave.extras import install_hint

    conf = getattr(settings, "Q_CLUSTER", None)
    if not isinstance(conf, dict):
        return []  # weave.E001 reports it
    named = [key for key in _BROKER_KEYS if conf.get(key)]
    if not named and conf.get("broker_class") in {*_ORM_BROKERS, "django_q.brokers.orm.ORM"}:
        return [
            Error(
                f"Q_CLUSTER['broker_class'] is {conf['broker_class']!r}, an ORM broker, but Q_CLUSTER has no 'orm': "
                "django-q2 does not know which database holds the queue.",
                hint=_ORM_HINT,
                id="weave.E009",
            )
        ]
    if named and named != ["redis"]:
        return []
    redis_missing = find_spec("redis") is None
    if named and not redis_missing:
        return []  # Redis, as the site asked
    why = "and the redis package is not installed" if redis_missing else "which this site never asked for"
    if not named:
        message = (
            "Q_CLUSTER names no broker (no 'orm', no 'redis'): django-q2 silently falls back to Redis on "
            f"localhost:6379, {why}."
        )
        return [Error(message, hint=_ORM_HINT, id="weave.E009")]
    return [
        Error(
            "Q_CLUSTER['redis'] puts the queue on Redis, and the redis package is not installed.",
            hint=f"{install_hint('redis')} Or: {_ORM_HINT}",
            id="weave.E009",
        )
    ]


@register(Tags.compatibility)
def check_weave_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Refuse WEAVE keys that do not exist (a typo would silently fall back to a default) and values
    of the wrong type or out of range; warn about retired keys, which are ignored."""
    raw = getattr(settings, "WEAVE", None)
    if raw is not None and not isinstance(raw, Mapping):
        return [
            Error(
                f"WEAVE is a {type(raw).__name__}; it must be a dict of settings.",
                hint="See weave/conf.py for the settings and their defaults.",
                id="weave.E006",
            )
        ]
    errors: list[CheckMessage] = []
    unknown = weave_settings.unknown_keys()
    if unknown:
        keys = plural(len(unknown), "setting{}")
        errors.append(
            Error(
                f"Unknown WEAVE {keys}: {', '.join(unknown)}.",
                hint="The core's settings are in weave/conf.py; each app declares its own next to its job type.",
                id="weave.E005",
            )
        )
    retired = weave_settings.retired_keys()
    if retired:
        keys = plural(len(retired), "setting{}")
        errors.append(
            Warning(
                f"WEAVE {keys} no longer read, ignored: {', '.join(retired)}.",
                hint="Remove them from WEAVE: " + "; ".join(f"{name}: {RETIRED[name]}" for name in retired) + ".",
                id="weave.W047",
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
        "Set the WEAVE WORKER_DB_* settings (docs/operations/partitions.md): a worker cut off mid-transaction "
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
    shortest = _shortest_ttl()
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
    return _limits_past_the_ttl(*shortest)


def _weave_task_backends() -> dict[str, Mapping[str, Any]]:
    """The `OPTIONS` of each `TASKS` backend that is Weave's, by alias (empty when it gives none)."""
    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, Mapping):
        return {}
    return {
        alias: options if isinstance(options := conf.get("OPTIONS"), Mapping) else {}
        for alias, conf in backends.items()
        if isinstance(conf, Mapping) and conf.get("BACKEND") == "weave.tasks.WeaveBackend"
    }


def _task_backend_ttls() -> list[tuple[Any, str]]:
    """The lease TTLs Weave's `django.tasks` backends give their tasks (`OPTIONS`: `LEASE_TTL`). A task's own
    `lease_ttl=` lives in code that may not be imported when checks run (docs/operations/partitions.md)."""
    return [
        (options["LEASE_TTL"], f"TASKS[{alias!r}]['OPTIONS']['LEASE_TTL']")
        for alias, options in _weave_task_backends().items()
        if "LEASE_TTL" in options
    ]


def _shortest_ttl() -> tuple[float, str] | None:
    """The shortest lease TTL in use, in seconds, and where it is set: a TTL key, or a job type's own `ttl`."""
    ttls = [(getattr(weave_settings, key), f"WEAVE['{key}']") for key in ttl_settings()]
    ttls += [(job.ttl, f"the {job.name!r} job type's ttl") for job in job_types() if job.ttl_setting is None]
    ttls += _task_backend_ttls()
    valid = [(float(t), where) for t, where in ttls if isinstance(t, int | float) and not isinstance(t, bool) and t > 0]
    return min(valid, default=None)


def _limits_past_the_ttl(shortest: float, where: str) -> list[Warning]:
    """weave.W021 for each WORKER_DB_* bound (or sum of bounds) that is not below the shortest lease TTL."""
    warnings: list[Warning] = []
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
                    f"WEAVE['{name}'] ({seconds:g} s) is not below the shortest lease TTL, {where} ({shortest:g} s): "
                    "a worker cut off from PostgreSQL could keep a job's row locked after its lease ran out, and hold "
                    "the job up to that long past the TTL.",
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


# --- django-q2 settings that stall or let host clocks decide (weave.broker) ---------------------------

_ORM_BROKERS = {"weave.broker.DatabaseClockORM"}
_REDIS_BROKERS = {"weave.broker_redis.PooledRedis"}


@register(Tags.compatibility)
def check_q_cluster_operations(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn about a Q_CLUSTER known to stall several clusters, or to let host clocks delay new tasks."""
    conf = getattr(settings, "Q_CLUSTER", None)
    if not isinstance(conf, dict):
        return []  # weave.E001 reports it
    warnings: list[Warning] = []
    save_limit = conf.get("save_limit", 250)  # django-q2's own default
    if isinstance(save_limit, int) and save_limit > 0:
        warnings.append(
            Warning(
                f"Q_CLUSTER['save_limit'] is {save_limit}: on every save, each cluster's monitor locks all stored "
                "successes (SELECT ... FOR UPDATE), so several clusters queue on each other and workers hang on "
                "recycle behind them.",
                hint="Set save_limit to -1 (Weave keeps its own history; failures are still stored).",
                id="weave.W040",
            )
        )
    broker = conf.get("broker_class")
    uses_orm = conf.get("orm") and not any(conf.get(k) for k in ("redis", "django_redis", "sqs", "iron_mq", "mongo"))
    if uses_orm and broker not in _ORM_BROKERS:
        warnings.append(
            Warning(
                "The ORM broker stamps task locks with the enqueuing host's clock: a worker host whose clock "
                "is behind waits out the difference for every new task.",
                hint="Set Q_CLUSTER['broker_class'] = 'weave.broker.DatabaseClockORM' (locks by the database clock).",
                id="weave.W041",
            )
        )
    if conf.get("redis") and not conf.get("django_redis") and broker not in _REDIS_BROKERS:
        warnings.append(
            Warning(
                "django-q2's Redis broker opens a new connection for every enqueue and waits on an unreachable "
                "Redis without a bound.",
                hint="Set Q_CLUSTER['broker_class'] = 'weave.broker_redis.PooledRedis' (one pool per process).",
                id="weave.W042",
            )
        )
    return warnings


@register(Tags.database)
def check_wake_listen(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Warning]:
    """With `check --database`: say whether the watchers' LISTEN connection hears a NOTIFY (a pooler loses them)."""
    from django.db import connection

    from weave import wake

    if not databases or connection.vendor != "postgresql":
        return []
    try:
        raw = wake.open_listener()
    except Exception as error:
        return [_listen_warning(f"the LISTEN connection could not be opened ({type(error).__name__}: {error})")]
    try:
        hears = wake.probe_listener(raw)
    finally:
        raw.close()
    if hears:
        return []
    return [_listen_warning("a NOTIFY sent through the site's connection did not arrive on it")]


def _listen_warning(why: str) -> Warning:
    from weave.wake import POLL_MAX, listen_target

    kind, target = listen_target()
    # A DSN may carry a password: it is never echoed.
    where = "the DSN in WAKE_LISTEN_DB" if kind == "dsn" else f"database alias {target!r}"
    return Warning(
        f"The due-time watchers cannot listen on {where}: {why}. They fall back to polling every {POLL_MAX:g} s.",
        hint="Behind a transaction pooler (pgbouncer), set WEAVE['WAKE_LISTEN_DB'] to a direct connection's "
        "database alias or DSN.",
        id="weave.W043",
    )


@register(Tags.compatibility)
def check_retention(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a WEAVE["RETENTION"] with an unknown kind or a period that is not a positive number of days."""
    from weave.retention import retention_problems

    if not weave_settings.valid("RETENTION"):
        return []  # weave.E006 reports the wrong type
    return [
        Error(
            f'WEAVE["RETENTION"]: {problem}.',
            hint="Give days (a number above 0) per kind, or None to keep that kind forever; see docs/operations.md.",
            id="weave.E044",
        )
        for problem in retention_problems()
    ]


@register(Tags.compatibility)
def check_task_timeouts(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn when a `WeaveBackend`'s TIMEOUT cannot fit in Q_CLUSTER['timeout'] after a drain's budget."""
    weave_backends = _weave_task_backends()
    if not weave_backends:
        return []
    from weave.tasks.options import DEFAULTS
    from weave.tasks.worker import DRAIN_BUDGET, q_cluster_timeout

    q_timeout = q_cluster_timeout()
    warnings: list[Warning] = []
    for alias, options in weave_backends.items():
        timeout = options.get("TIMEOUT", DEFAULTS["timeout"])
        if q_timeout is None or isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            continue  # a wrong TIMEOUT is refused when the backend is built
        if timeout + DRAIN_BUDGET > q_timeout:
            warnings.append(
                Warning(
                    f"TASKS[{alias!r}] lets a task run {timeout:g} s, and a drain starts tasks for {DRAIN_BUDGET:g} s: "
                    f"past Q_CLUSTER['timeout'] ({q_timeout:g} s), where django-q2 stops the drain, so a long "
                    "task is stopped mid-run on every attempt.",
                    hint=f"Raise Q_CLUSTER['timeout'] to at least {timeout + DRAIN_BUDGET:g} s ('retry' above it), "
                    "or lower the backend's OPTIONS['TIMEOUT']. A task's own timeout needs the same room.",
                    id="weave.W048",
                )
            )
    return warnings

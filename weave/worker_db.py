"""Session limits (`WORKER_DB_*`) for django-q2 workers' PostgreSQL connections, on both ends of the
link: a worker cut off mid-transaction keeps its row locks while the server believes it alive. Only
worker processes get them (`post_spawn`, `pre_execute`)."""

import logging
import threading
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from weave.conf import weave_settings

logger = logging.getLogger("weave.worker_db")

_lock = threading.Lock()
_worker_mode = False


def client_options() -> dict[str, int]:
    """libpq connection parameters for a worker's side of the link."""
    return {
        "connect_timeout": int(weave_settings.WORKER_DB_CONNECT_TIMEOUT),
        "keepalives": 1,
        "keepalives_idle": int(weave_settings.WORKER_DB_KEEPALIVES_IDLE),
        "keepalives_interval": int(weave_settings.WORKER_DB_KEEPALIVES_INTERVAL),
        "keepalives_count": int(weave_settings.WORKER_DB_KEEPALIVES_COUNT),
        "tcp_user_timeout": _ms(weave_settings.WORKER_DB_TCP_USER_TIMEOUT),
    }


def server_settings() -> dict[str, int]:
    """PostgreSQL session settings for a worker's session (milliseconds or whole seconds, as each expects)."""
    return {
        "statement_timeout": _ms(weave_settings.WORKER_DB_STATEMENT_TIMEOUT),
        "idle_in_transaction_session_timeout": _ms(weave_settings.WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT),
        "tcp_keepalives_idle": int(weave_settings.WORKER_DB_KEEPALIVES_IDLE),
        "tcp_keepalives_interval": int(weave_settings.WORKER_DB_KEEPALIVES_INTERVAL),
        "tcp_keepalives_count": int(weave_settings.WORKER_DB_KEEPALIVES_COUNT),
        "tcp_user_timeout": _ms(weave_settings.WORKER_DB_TCP_USER_TIMEOUT),
    }


def worker_options(options: dict[str, Any]) -> dict[str, Any]:
    """Return `options` (a DATABASES OPTIONS dict) with the worker limits added; the WEAVE values win."""
    merged = {**options, **client_options()}
    limits = " ".join(f"-c {name}={value}" for name, value in server_settings().items())
    # After the site's own `options`: for a repeated -c, PostgreSQL keeps the last one.
    merged["options"] = f"{options.get('options', '')} {limits}".strip()
    return merged


def in_worker_mode() -> bool:
    return _worker_mode


def enter_worker_mode(**signal_kwargs: Any) -> None:
    """Give every PostgreSQL connection this process opens from now on the worker limits (idempotent)."""
    global _worker_mode
    task = signal_kwargs.get("task") or {}
    if task.get("sync"):  # a sync task runs inside the enqueuing (web or test) process: not a worker
        return
    with _lock:
        if _worker_mode or not weave_settings.WORKER_DB_LIMITS:
            return
        aliases = []
        for alias, settings_dict in connections.settings.items():
            if settings_dict.get("ENGINE", "").endswith("postgresql"):
                # In place: every thread's connection wrapper in this process shares this dict.
                settings_dict["OPTIONS"] = worker_options(settings_dict.get("OPTIONS") or {})
                aliases.append(alias)
        _worker_mode = True
    for conn in connections.all(initialized_only=True):
        # Reopened on next use, with the limits; a connection inside a transaction keeps going.
        if conn.alias in aliases and not conn.in_atomic_block:
            conn.close()
    if aliases:
        logger.info("event=worker_db_limits aliases=%s settings=%s", ",".join(aliases), server_settings())


def session_limits(using: str = "default") -> dict[str, Any]:
    """The limits on this thread's connection to `using`, as server and libpq see them (a diagnostic task)."""
    conn = connections[using]
    if conn.vendor != "postgresql":
        return {}
    conn.ensure_connection()
    with conn.cursor() as cursor:
        server = {}
        for name in server_settings():
            cursor.execute(f"SHOW {name}")  # names from our own fixed list, never outside input
            server[name] = cursor.fetchone()[0]
    params = conn.connection.info.get_parameters()
    client = {name: params.get(name) for name in client_options()}
    return {"worker_mode": _worker_mode, "server": server, "client": client}


# Besides connection exceptions (08...): idle-in-transaction timeout, statement_timeout, server shutdowns.
_CUT_OFF_STATES = {"25P03", "57014", "57P01", "57P02", "57P03", "57P05"}


def is_cut_off(error: BaseException) -> bool:
    """Whether `error` means the database link failed or the server ended the session, not a refusal of the SQL."""
    if isinstance(error, (OperationalError, InterfaceError)):
        return True
    state = getattr(error.__cause__, "sqlstate", None) or ""
    return isinstance(error, DatabaseError) and (state.startswith("08") or state in _CUT_OFF_STATES)


def _ms(seconds: float) -> int:
    return int(round(float(seconds) * 1000))

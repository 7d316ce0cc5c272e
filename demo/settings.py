"""Settings for the standalone Weave site, read from the environment.

Only this site imports this module. The apps (`notifications`, `onboarding`) and the lease core
read their configuration through `weave.conf`, so they run inside any Django site.
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


# Off unless asked for: `make run`, `make test` and the chaos run turn it on for themselves.
DEBUG = env_bool("DEBUG", False)

# What a production start (DEBUG off) must be given; missing ones stop the start with one clear message.
_missing: list[str] = []
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    _missing.append(
        "SECRET_KEY (a long random string, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(50))'`)"
    )
    # The "django-insecure-" prefix makes `check --deploy` flag this key (security.W009) if it is ever used.
    SECRET_KEY = "django-insecure-weave-development-key-not-for-production"
_PUSH_URL = os.environ.get("WEAVE_PUSH_URL", "")
_PUSH_TOKEN = os.environ.get("WEAVE_PUSH_TOKEN", "")
if not _PUSH_URL:
    _missing.append("WEAVE_PUSH_URL (the push provider's endpoint)")
if not _PUSH_TOKEN:
    _missing.append("WEAVE_PUSH_TOKEN (the push provider's bearer token)")
if _missing and not DEBUG:
    raise ImproperlyConfigured(
        "DEBUG is off (production), but these settings are missing from the environment: "
        + "; ".join(_missing)
        + ". Set them, or set DEBUG=true for a local run (`make run` does)."
    )
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "weave",
    "notifications",
    "onboarding",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo.urls"
WSGI_APPLICATION = "demo.wsgi.application"

# The demo has no login page of its own: its pages send visitors to the admin's.
LOGIN_URL = "admin:login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
# DATABASE_URL picks the database; without it an SQLite file in the project is used.
DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
# Workers keep their connection between tasks: reconnecting per task costs more than the task.
# DB_CONN_MAX_AGE=0 gives Django's default (a new connection per request or task), for the bench's anchors.
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "60")), conn_health_checks=True
    )
}
# DB_TRANSACTION_POOLER=true: DATABASE_URL goes through a transaction pooler (pgbouncer
# pool_mode=transaction). A server-side cursor cannot outlive its transaction there, so none is used.
# The watchers then need WEAVE_WAKE_LISTEN_DB (a direct DSN) to LISTEN, or they poll (docs/operations.md).
if env_bool("DB_TRANSACTION_POOLER", False):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A direct connection may keep named prepared statements. Django switches them off unless OPTIONS set
    # psycopg's prepare_threshold; its own client-side cursors never prepare, so this reaches only the
    # push hand-over's statements, which Weave asks to prepare (docs/operations.md, "Prepared statements").
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # Several processes (site, qcluster workers, heartbeat threads) share one file:
        # WAL lets readers run beside the writer, the timeout waits for the lock instead of
        # failing, and IMMEDIATE takes the write lock at BEGIN so a transaction never has to
        # upgrade a read lock midway (which SQLite answers with "database is locked").
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
    }
    # Tests that start real worker processes need a file the processes can share.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "test_db.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Times with seconds and zone wherever Django formats one (demo/formats/en/formats.py).
FORMAT_MODULE_PATH = ["demo.formats"]

# --- HTTPS in production (what `check --deploy` asks for); each can be turned off from the environment.
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    # Behind a TLS-terminating proxy, tell Django which header says the request came in over HTTPS.
    if os.environ.get("SECURE_PROXY_SSL_HEADER"):
        SECURE_PROXY_SSL_HEADER = (os.environ["SECURE_PROXY_SSL_HEADER"], "https")

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# --- django-q2 -------------------------------------------------------------------------------
Q_WORKERS = int(os.environ.get("WEAVE_Q_WORKERS", "2"))
Q_CLUSTER = {
    "name": os.environ.get("WEAVE_Q_NAME", "weave"),
    "orm": "default",  # the ORM broker: the queue lives in the same database as the jobs
    "workers": Q_WORKERS,
    # A task is killed after `timeout` seconds. Every Weave task stops starting new work well
    # before that (WEAVE PUSH_BUDGET / ONBOARDING_BUDGET).
    "timeout": 120,
    # The ORM broker hands a task out again once it is `retry` seconds old, even if the first
    # worker is still running it. Keep it well above `timeout` so that only happens after a crash.
    "retry": 300,
    "max_attempts": 3,
    # One task per fetch and at most `workers` queued here: a task fetched while every worker is busy
    # waits for a free one (its wake-up is asked for again elsewhere after 3 s), well inside `retry`.
    "bulk": 1,
    "queue_limit": Q_WORKERS,
    "poll": 0.2,
    "catch_up": False,
    "ack_failures": True,
    # Weave keeps its own history (attempts, runs), so django-q2 need not store successes. A positive
    # save_limit makes every monitor lock all stored successes on each save (SELECT ... FOR UPDATE):
    # several clusters then queue on each other, and workers hang on exit behind them (weave.W040).
    # Failures are still stored.
    "save_limit": -1,
    # Each worker restarts after about this many tasks. Weave staggers it per worker process (between
    # 1x and 1.5x; weave.broker.stagger_recycle), so the workers never all recycle at once.
    "recycle": 500,
    # Task locks stamped and compared by the database clock: a worker host whose clock is behind the
    # web host's takes a new task at once instead of after the skew (weave.W041). A dequeue cut off by a
    # PostgreSQL restart backs off and asks again instead of stopping the pusher for 10 s.
    "broker_class": "weave.broker.DatabaseClockORM",
    "label": "Django Q2",
}
# WEAVE_Q_REDIS=redis://host:port/db runs the cluster on django-q2's Redis broker instead of the ORM one,
# with one connection pool per process and bounded connect/read times (weave.W042).
if os.environ.get("WEAVE_Q_REDIS"):
    del Q_CLUSTER["orm"]
    del Q_CLUSTER["broker_class"]
    Q_CLUSTER["redis"] = os.environ["WEAVE_Q_REDIS"]
    Q_CLUSTER["broker_class"] = "weave.broker_redis.PooledRedis"
# WEAVE_Q_BROKER_CLASS overrides the broker class (empty: django-q2's own broker, for comparisons).
if "WEAVE_Q_BROKER_CLASS" in os.environ:
    Q_CLUSTER["broker_class"] = os.environ["WEAVE_Q_BROKER_CLASS"] or None

# --- Weave -------------------------------------------------------------------------------------
WEAVE: dict[str, object] = {
    # Local defaults only with DEBUG on (a production start without them stopped above).
    "PUSH_URL": _PUSH_URL or "http://127.0.0.1:8100/push",
    "PUSH_TOKEN": _PUSH_TOKEN or "dev-token",
    "SUPPLIER_API_URL": os.environ.get("WEAVE_SUPPLIER_API_URL", "http://127.0.0.1:8200"),
    # Prometheus scrapes /metrics with this bearer token; unset, only staff sessions may read it.
    "METRICS_TOKEN": os.environ.get("WEAVE_METRICS_TOKEN", ""),
}


def _weave_env_overrides() -> dict[str, float | int | bool]:
    """Read `WEAVE_<KEY>` for every numeric WEAVE setting, so a parent process (the chaos runner,
    a demo script) can give its worker processes short leases, budgets or batch sizes."""
    import notifications.apps  # noqa: F401  (defining the apps' settings groups declares their keys)
    import onboarding.apps  # noqa: F401
    from weave.conf import KEYS

    overrides: dict[str, float | int | bool] = {}
    for name, key in KEYS.items():
        raw = os.environ.get(f"WEAVE_{name}")
        if raw is None or key.kind not in (int, float, bool) or name in WEAVE:
            continue
        spelled = raw.strip().lower()
        try:
            if key.kind is bool:
                # bool("false") is True: a flag reads the usual spellings, and nothing else.
                if spelled not in _TRUE | _FALSE:
                    raise ValueError(raw)
                overrides[name] = spelled in _TRUE
            else:
                overrides[name] = key.kind(raw)
        except ValueError:
            # A typo in a worker's environment must stop the start, not surface as a traceback or a default.
            raise ImproperlyConfigured(f"WEAVE_{name}={raw!r} is not {key.expected()}.") from None
    return overrides


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


WEAVE.update(_weave_env_overrides())
# The local push fakes listen on 127.0.0.1, which the Web Push destination policy refuses. Development runs
# (DEBUG on) let loopback through; a production start never does, whatever the environment says.
WEAVE["PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK"] = DEBUG
# A direct session connection (alias or DSN) for the watchers' LISTEN, e.g. behind pgbouncer.
if os.environ.get("WEAVE_WAKE_LISTEN_DB"):
    WEAVE["WAKE_LISTEN_DB"] = os.environ["WEAVE_WAKE_LISTEN_DB"]
# The onboarding plan, as comma-separated dotted paths (the chaos run adds the demo's own ERP step).
if os.environ.get("WEAVE_ONBOARDING_STEPS"):
    WEAVE["ONBOARDING_STEPS"] = [p.strip() for p in os.environ["WEAVE_ONBOARDING_STEPS"].split(",") if p.strip()]


def _push_backends_from_file() -> dict | None:
    """`WEAVE_PUSH_BACKENDS_FILE`: a JSON file of PUSH_BACKENDS (written by `manage.py fake_push_services`)."""
    path = os.environ.get("WEAVE_PUSH_BACKENDS_FILE")
    if not path:
        return None
    import json

    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


if (_backends := _push_backends_from_file()) is not None:
    # The PUSH_URL webhook stays the "default" alias next to these (see notifications.backends.registry).
    WEAVE["PUSH_BACKENDS"] = _backends

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"line": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
    "loggers": {
        "weave": {"handlers": ["console"], "level": os.environ.get("WEAVE_LOG_LEVEL", "INFO"), "propagate": False},
    },
}

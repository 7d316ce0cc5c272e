"""The bench harness: a PostgreSQL bench database, the fake provider and qcluster processes.

Everything a scenario needs to run one measurement side by side with another: reset the tables,
load a backlog, start the provider at a given latency and K clusters with W workers, and time how
long it takes until every row is terminal. Processes are started through `tools.processes`
so each sits in its own process group and a crashed host is one `killpg` away.
"""

import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dj_database_url
import httpx

from tools.processes import PROJECT_ROOT, Child, ProcessGroups, wait_until

BENCH_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/weave_bench"
LOG_DIR = PROJECT_ROOT / "bench" / ".logs"

# The environment every process of a run shares (this one and the clusters it starts). DEBUG off:
# with DEBUG on Django keeps every query in memory, a cost neither Weave nor the baseline has in production.
BASE_ENV = {
    "DJANGO_SETTINGS_MODULE": "demo.settings",
    "DEBUG": "false",
    "SECRET_KEY": "weave-bench-only-not-a-secret-" + "x" * 32,
    # DEBUG off is a production start, which needs push credentials; the bench's fake accepts any token.
    "WEAVE_PUSH_TOKEN": "bench-token-not-a-secret",
    "WEAVE_PUSH_URL": "http://127.0.0.1:8100/push",  # each cluster gets the bench provider's own URL
    "WEAVE_Q_NAME": "weave-bench",
    "WEAVE_LOG_LEVEL": "WARNING",
}


def configure(database_url: str | None = None) -> str:
    """Point this process at the bench database and set up Django; return the database URL."""
    url = database_url or os.environ.get("BENCH_DATABASE_URL") or BENCH_DATABASE_URL
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit(f"The benchmarks need PostgreSQL; BENCH_DATABASE_URL is {url!r}.")
    os.environ.update(BASE_ENV)
    os.environ["DATABASE_URL"] = url
    _create_database(url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return url


def _create_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    db = dj_database_url.parse(url)
    params = {
        "user": db["USER"] or None,
        "password": db["PASSWORD"] or None,
        "host": db["HOST"] or None,
        "port": db["PORT"] or None,
        "connect_timeout": 5,
    }
    try:
        admin = psycopg.connect(dbname="postgres", autocommit=True, **params)
    except psycopg.OperationalError as exc:
        raise SystemExit(f"PostgreSQL is not reachable at {db['HOST']}:{db['PORT']}: {exc}") from exc
    with admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
        if not exists:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))


def drop_database(url: str | None = None) -> None:
    """Drop the bench database (`bench/run.py --drop`)."""
    import psycopg
    from psycopg import sql

    db = dj_database_url.parse(url or os.environ.get("BENCH_DATABASE_URL") or BENCH_DATABASE_URL)
    with psycopg.connect(
        dbname="postgres",
        autocommit=True,
        user=db["USER"] or None,
        password=db["PASSWORD"] or None,
        host=db["HOST"] or None,
        port=db["PORT"] or None,
    ) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db["NAME"])))


# --- database state ------------------------------------------------------------------------------


def reset_tables() -> None:
    """Empty the notifications and django-q2 queue tables, so every measurement starts alike."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE weave_notifications_deliveryattempt, weave_notifications_notification, "
            "django_q_ormq, django_q_task RESTART IDENTITY CASCADE"
        )
    # Fresh statistics: a TRUNCATEd table's plan should not come from the previous run's numbers.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE weave_notifications_notification")


def load_protocol_rows(alias: str, n: int, token: str) -> None:
    """Start a protocol round alike for every bench: empty tables, no cached credential (as a fresh
    worker process has none) and `n` due rows to one `token` on backend `alias`."""
    from django.utils import timezone

    from notifications.backends.credentials import forget_shared
    from notifications.models import Notification

    reset_tables()
    forget_shared()
    now = timezone.now()
    Notification.objects.bulk_create(
        Notification(
            device_token=token, backend=alias, title="Weave bench", body=f"Notification {i}", data={"i": str(i)},
            idempotency_key=uuid.uuid4(), next_attempt_at=now,
        )
        for i in range(n)
    )  # fmt: skip


def build_rows(n: int, *, due: bool) -> list:
    """Return `n` unsaved pending notifications (`due=False`: no due time, so Weave's drains ignore them)."""
    from django.utils import timezone

    from notifications.models import Notification

    now = timezone.now() if due else None
    return [
        Notification(
            device_token=f"bench-device-{i:06d}",
            title="Weave bench",
            body=f"Notification {i} of {n}",
            data={"i": i},
            idempotency_key=uuid.uuid4(),
            next_attempt_at=now,
        )
        for i in range(n)
    ]


def pending_count() -> int:
    from notifications.models import Notification

    return Notification.objects.filter(status=Notification.Status.PENDING).count()


def database_transactions() -> int:
    """Transactions committed or rolled back in this database so far, by every session (pg_stat_database)."""
    from django.db import connection

    with connection.cursor() as cursor:
        # Our own pending counters first; the servers' exited sessions flushed theirs on exit.
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def status_counts() -> dict[str, int]:
    from django.db.models import Count

    from notifications.models import Notification

    return dict(Notification.objects.values_list("status").annotate(n=Count("pk")).order_by())


def wait_for_terminal(
    expected: int, *, t0: float, timeout: float, interval: float = 0.1, stall: float = 60.0
) -> tuple[float, int]:
    """Poll until no row is pending; return (seconds since `t0`, a `time.monotonic()` value; polls made).

    Gives up after `timeout`, or sooner when the pending count has not moved for `stall` seconds
    (a failing task would otherwise hold the whole run until the timeout).
    """
    deadline = time.monotonic() + timeout
    polls = 0
    last, moved = None, time.monotonic()
    while time.monotonic() < deadline:
        polls += 1
        pending = pending_count()
        if pending == 0:
            return time.monotonic() - t0, polls
        if pending != last:
            last, moved = pending, time.monotonic()
        elif time.monotonic() - moved > stall:
            raise TimeoutError(f"{pending} of {expected} notifications still pending, none finished in {stall:.0f} s.")
        time.sleep(interval)
    raise TimeoutError(f"{pending_count()} of {expected} notifications still pending after {timeout:.0f} s.")


# --- processes -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Provider:
    """A running fake push provider (the notifications app's, over real HTTP on loopback)."""

    child: Child
    port: int
    latency_ms: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def push_url(self) -> str:
        return f"{self.base_url}/push"

    def stats(self) -> dict:
        return httpx.get(f"{self.base_url}/_stats", timeout=30).json()

    def reset(self) -> None:
        httpx.post(f"{self.base_url}/_reset", timeout=30).raise_for_status()


def provider_command(port: int, latency_ms: int) -> list[str]:
    """The provider's command line: the app's own fake provider, as the demo and the chaos run use it."""
    return [
        sys.executable,
        str(PROJECT_ROOT / "manage.py"),
        "fake_push_provider",
        "--port",
        str(port),
        "--latency-ms",
        str(latency_ms),
    ]


class Bench:
    """One run's processes: a provider and clusters, all stopped on exit."""

    def __init__(self) -> None:
        self.groups = ProcessGroups(log_dir=LOG_DIR)
        self.provider: Provider | None = None
        self.clusters: list[Child] = []
        self._names = 0

    def close(self) -> None:
        self.groups.stop_all()
        self.clusters = []
        self.provider = None

    def start_provider(self, latency_ms: int) -> Provider:
        port = free_port()
        child = self.groups.start(f"provider-{port}", provider_command(port, latency_ms))
        provider = Provider(child=child, port=port, latency_ms=latency_ms)

        def up() -> bool:
            if not child.alive():
                raise RuntimeError(f"The fake provider exited:\n{child.log_tail()}")
            try:
                provider.stats()
            except httpx.HTTPError:
                return False
            return True

        wait_until(up, timeout=30, message="the fake provider to answer /_stats")
        self.provider = provider
        return provider

    def provider_reset(self) -> None:
        assert self.provider is not None
        self.provider.reset()

    def cluster_env(self, *, workers: int, **weave: object) -> dict[str, str]:
        assert self.provider is not None, "start the provider first"
        env = {"WEAVE_Q_WORKERS": str(workers), "WEAVE_PUSH_URL": self.provider.push_url}
        env.update({f"WEAVE_{key.upper()}": str(value) for key, value in weave.items() if value is not None})
        return env

    def start_cluster(self, *, workers: int, q_name: str | None = None, **weave: object) -> Child:
        """Start one `qcluster` with `workers` workers and WEAVE overrides; wait until it runs.

        `q_name` gives the cluster its own django-q2 queue (the ORM broker keys tasks by cluster name).
        """
        self._names += 1
        name = f"qcluster-{self._names}"
        log = LOG_DIR / f"{name}.log"
        log.unlink(missing_ok=True)
        env = self.cluster_env(workers=workers, **weave)
        if q_name:
            env["WEAVE_Q_NAME"] = q_name
        child = self.groups.manage(name, "qcluster", env=env)

        def running() -> bool:
            if not child.alive():
                raise RuntimeError(f"{name} exited:\n{child.log_tail()}")
            return log.exists() and "running." in log.read_text(errors="replace")

        wait_until(running, timeout=60, message=f"{name} to start")
        _settled(child)
        self.clusters.append(child)
        return child

    def stop_clusters(self) -> None:
        for child in self.clusters:
            self.groups.stop(child, grace=10)
        self.clusters = []


def _settled(cluster: Child, *, quiet: float = 0.05, span: float = 0.5, timeout: float = 30.0) -> None:
    """Wait until a cluster's processes have finished starting: less than `quiet` of a core used over `span`.

    django-q2 says the cluster is running once its processes are spawned, while each worker still imports
    the drain's modules, readies the backends' credentials and settles its heap (`notifications.tasks.
    warm_up`), 0.3 to 0.4 s of CPU per cluster on the bench machine. A worker pays that once and then
    serves tasks until it is recycled, yet a meter started right away counted it in the run's CPU per
    push: about 0.13 s per 1,000 at N = 3,000 in the protocol bench's `qcluster` rows."""
    deadline = time.monotonic() + timeout
    before = cluster.cpu()
    while time.monotonic() < deadline:
        time.sleep(span)
        now = cluster.cpu()
        if now - before < quiet * span:
            return
        before = now
    raise RuntimeError(f"{cluster.name} still used more than {quiet:.0%} of a core {timeout:.0f} s after its start")


@contextmanager
def bench() -> Iterator[Bench]:
    run = Bench()
    try:
        yield run
    finally:
        run.close()


def log_dir() -> Path:
    return LOG_DIR

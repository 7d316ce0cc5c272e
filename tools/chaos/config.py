"""What one chaos run does: its size, its faults, its timing."""

from dataclasses import dataclass, field
from pathlib import Path

from onboarding.steps.plan import DEFAULT_PLAN


@dataclass
class ChaosConfig:
    notifications: int = 10_000  # N, created through notification_create
    runs: int = 200  # M, onboarding runs created through onboarding_start
    clusters: int = 4  # K qcluster processes, each its own process group
    workers: int = 2  # django-q2 workers per cluster
    seed: int = 1

    # Faults on a seeded schedule while the load drains.
    kills: int = 2  # SIGKILL a whole cluster, start a fresh one
    stops: int = 2  # SIGSTOP one worker holding a lease for `stop_factor` x TTL, then SIGCONT
    restarts: int = 1  # restart the fake push provider and supplier services
    # Cut one cluster's link to PostgreSQL silently (tools/partition.py: no close, no reset) for
    # `partition_factor` x TTL, then heal it. Each cluster reaches PostgreSQL through its own proxy.
    partitions: int = 1
    # What a PostgreSQL restart or failover looks like to the workers: every cluster's sessions end at
    # once (through its proxy) and reconnecting fails for `db_down_seconds`. The server itself keeps
    # running, so the runner and the audit read on.
    db_restarts: int = 1
    db_down_seconds: float = 2.0
    # Restart the PostgreSQL server under everyone (pg_ctl stop, `pg_downtime` seconds down, start), by
    # turns `-m fast` (sessions told, then closed) and `-m immediate` (a crash, then crash recovery). Only
    # against a server the runner controls: a throwaway cluster (tools/pgserver.py), never a shared one.
    pg_restarts: int = 0
    pg_downtime: float = 1.0
    stop_factor: float = 2.0
    partition_factor: float = 2.0
    # Faults are placed by progress, not by the clock, so they land while the load drains however fast
    # this machine is: each fault fires once this share of the jobs is finished (seeded, spread over the
    # window) and at least `fault_gap` seconds after the previous one.
    fault_window: tuple[float, float] = (0.05, 0.7)
    fault_gap: float = 3.0

    # Lease timing given to the workers: short, so the stale-worker path runs for real.
    lease_ttl: float = 4.0
    push_timeout: float = 1.5
    push_batch: int = 50
    push_concurrency: int = 10
    push_budget: float = 20.0
    push_max_attempts: int = 8
    onboarding_budget: float = 30.0
    supplier_timeout: float = 1.5
    # The runner enqueues both sweeps this often: django-q2 schedules tick once a minute at best,
    # which would make the recovery figure measure the schedule, not the protocol.
    sweep_every: float = 3.0

    # Provider faults (issue 5): latency, 5-10 % 5xx, 5 % 429 with Retry-After, 1-2 % deliver-then-hang.
    latency_ms: int = 20
    supplier_latency_ms: int = 150  # onboarding steps take a while, so faults find runs in flight
    rate_5xx: float = 0.07
    rate_429: float = 0.05
    retry_after: int = 1
    rate_hang: float = 0.015
    hang_seconds: float = 3.0  # past the client timeouts above

    # Share of suppliers built to fail, by kind: each must end failed with that business reason.
    invalid_tax_share: float = 0.04
    sanctioned_share: float = 0.03
    bad_iban_share: float = 0.03

    # The onboarding plan: the six built-in steps with the demo site's own ERP step among them, so the
    # audit shows a custom step is fenced like the built-ins.
    steps: tuple[str, ...] = (*DEFAULT_PLAN[:3], "demo.steps.CreateErpVendor", *DEFAULT_PLAN[3:])
    # The custom steps' own tables, by model label (tools never import the demo site): each row must be
    # written by its step's receipt (run, fence), like the built-in vendor, terms and bank rows.
    step_tables: tuple[tuple[str, str, str], ...] = (
        ("create_erp_vendor", "weave_demo.ErpVendor", "ERP vendor (custom step)"),
    )

    # Devices on FCM, APNs and Web Push (issue 11): 0 leaves them out. A share of them have dead tokens
    # (the fakes refuse them as unregistered); each send to a user goes to all its active devices, and a
    # share of the sends expire after `short_ttl` seconds, so some expire while they wait in the queue.
    devices: int = 0
    dead_device_share: float = 0.2
    device_sends: int = 0  # notification_send_to_user calls; 0: as many as there are devices
    expiring_share: float = 0.3
    short_ttl: int = 2
    push_fakes_port: int = 18101  # FCM; APNs and Web Push on the next two ports

    # Provider-edge faults (tools/chaos/edge.py): each switches one hostile mode on in the webhook fake
    # (extra answers, an early answer, short/long bodies, an unsolicited 408, drops before delivery)
    # and, with devices, one in the HTTP/2 fakes (REFUSED_STREAM, GOAWAY, a stalled TLS handshake, FCM's
    # token endpoint answering 500) for `edge_seconds`, then off. Modes cycle by the fault's number.
    edge_faults: int = 0
    edge_seconds: float = 3.0
    # Sends to users' devices created as an HTTP/2 mode switches on, so it has traffic to disturb.
    edge_device_sends: int = 6

    deadline: float = 600.0  # seconds after the load starts; then the audit runs on whatever is there
    push_port: int = 18100
    supplier_port: int = 18200
    log_dir: Path = field(default_factory=lambda: Path(".run/chaos"))
    progress: bool = True

    @property
    def push_url(self) -> str:
        return f"http://127.0.0.1:{self.push_port}/push"

    @property
    def push_fakes_dir(self) -> Path:
        return self.log_dir / "push-fakes"

    @property
    def push_backends_file(self) -> Path:
        return self.push_fakes_dir / "push_backends.json"

    @property
    def push_fakes_control(self) -> Path:
        return self.push_fakes_dir / "faults.json"

    @property
    def supplier_url(self) -> str:
        return f"http://127.0.0.1:{self.supplier_port}"

    def worker_env(self) -> dict[str, str]:
        """Environment for every qcluster child (read by demo/settings.py)."""
        return {
            "WEAVE_PUSH_URL": self.push_url,
            "WEAVE_SUPPLIER_API_URL": self.supplier_url,
            "WEAVE_Q_WORKERS": str(self.workers),
            "WEAVE_LEASE_TTL": str(self.lease_ttl),
            "WEAVE_PUSH_LEASE_TTL": str(self.lease_ttl),
            "WEAVE_ONBOARDING_LEASE_TTL": str(self.lease_ttl),
            "WEAVE_PUSH_TIMEOUT": str(self.push_timeout),
            "WEAVE_PUSH_BATCH_SIZE": str(self.push_batch),
            "WEAVE_PUSH_CONCURRENCY": str(self.push_concurrency),
            "WEAVE_PUSH_HTTP2_CONCURRENCY": str(self.push_concurrency),
            "WEAVE_PUSH_BUDGET": str(self.push_budget),
            "WEAVE_PUSH_MAX_ATTEMPTS": str(self.push_max_attempts),
            "WEAVE_PUSH_BACKOFF_BASE": "0.5",
            "WEAVE_PUSH_BACKOFF_MAX": "5",
            "WEAVE_PUSH_BREAKER_COOLDOWN": "2",
            "WEAVE_ONBOARDING_BUDGET": str(self.onboarding_budget),
            "WEAVE_SUPPLIER_API_TIMEOUT": str(self.supplier_timeout),
            "WEAVE_ONBOARDING_RETRY_BACKOFF": "0.2",
            "WEAVE_ONBOARDING_RETRY_AFTER_MAX": "2",
            "WEAVE_LOG_LEVEL": "WARNING",
            "WEAVE_ONBOARDING_STEPS": ",".join(self.steps),
            # Worker session limits scaled to the short lease (issue 17): the server ends a partitioned
            # worker's transaction well before its lease could be taken over.
            "WEAVE_WORKER_DB_STATEMENT_TIMEOUT": str(self.lease_ttl / 4),
            "WEAVE_WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT": str(self.lease_ttl / 4),
            "WEAVE_WORKER_DB_TCP_USER_TIMEOUT": str(self.lease_ttl / 2),
            "WEAVE_WORKER_DB_CONNECT_TIMEOUT": "2",  # libpq's minimum
            "WEAVE_WORKER_DB_KEEPALIVES_IDLE": "1",
            "WEAVE_WORKER_DB_KEEPALIVES_INTERVAL": "1",
            "WEAVE_WORKER_DB_KEEPALIVES_COUNT": "1",
            **({"WEAVE_PUSH_BACKENDS_FILE": str(self.push_backends_file.resolve())} if self.devices else {}),
        }

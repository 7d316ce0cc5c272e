"""The measurements of issue 6. Each `scenario_<name>(results, args)` adds its numbers to `results`."""

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench import harness
from bench.harness import Bench
from bench.report import Results

WEAVE_DRAIN = "notifications.tasks.drain"
UNFENCED_DRAIN = "bench.unfenced.drain"
GROUP_FINISH_DRAIN = "bench.variants.drain"
BASELINE_TASK = "bench.baseline.send_push"
RECOVERY_LATENCY_MS = 200


@dataclass
class Throughput:
    label: str
    n: int
    seconds: float
    workers: int
    latency_ms: int
    batch_size: int | None = None
    provider_requests: int = 0
    provider_unique: int = 0
    db_transactions: int = 0  # every session's, from pg_stat_database, less the bench's own polling
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.n / self.seconds

    @property
    def xacts_per_row(self) -> float:
        return self.db_transactions / self.n


# --- throughput runs ---------------------------------------------------------------------------------


def _measure(run: Bench, label: str, n: int, workers: int, batch_size: int | None, load) -> Throughput:
    """Load the backlog with `load()` (which commits it and returns t0), then time until no row is pending."""
    run.provider_reset()
    xacts_before = harness.database_transactions()
    t0 = load()
    seconds, polls = harness.wait_for_terminal(n, t0=t0, timeout=max(120, n / 10))
    # Stop first: a session flushes its statistics when it ends, so the count below is complete.
    run.stop_clusters()
    stats = run.provider.stats()
    xacts = harness.database_transactions() - xacts_before - polls - 2
    result = Throughput(
        label=label,
        n=n,
        seconds=seconds,
        workers=workers,
        latency_ms=run.provider.latency_ms,
        batch_size=batch_size,
        provider_requests=stats.get("requests", -1),
        provider_unique=stats.get("unique_deliveries", -1),
        db_transactions=xacts,
        statuses=harness.status_counts(),
    )
    delivered = result.statuses.get("delivered", 0)
    print(
        f"   {label:<10} W={workers} batch={batch_size or '-':<4} latency={run.provider.latency_ms} ms: "
        f"{n} in {seconds:.2f} s = {result.rate:,.0f}/s (delivered {delivered}, provider "
        f"{result.provider_requests} requests / {result.provider_unique} unique, {result.xacts_per_row:.2f} xacts/row)",
        flush=True,
    )
    if delivered != n:
        raise RuntimeError(f"{label}: only {delivered} of {n} delivered: {result.statuses}")
    return result


def baseline_throughput(run: Bench, *, n: int, workers: int, save: bool = True) -> Throughput:
    """One django-q2 task per notification, on a fresh cluster with `workers` workers.

    `save=False` enqueues each task with django-q2's `save=False`: no result row, so the cluster's
    monitor skips its `save_limit` pruning (which reads every saved success row, per task).
    """
    from django.db import transaction
    from django_q.tasks import async_task

    from notifications.models import Notification

    harness.reset_tables()
    run.start_cluster(workers=workers)

    def load() -> float:
        # One transaction: every task becomes visible to the cluster at the same instant.
        with transaction.atomic():
            rows = Notification.objects.bulk_create(harness.build_rows(n, due=False), batch_size=1000)
            for row in rows:
                async_task(BASELINE_TASK, row.pk, group="bench-baseline", save=save)
        return time.monotonic()

    try:
        return _measure(run, "baseline" if save else "baseline-nosave", n, workers, None, load)
    finally:
        run.stop_clusters()


def weave_throughput(
    run: Bench,
    *,
    n: int,
    workers: int,
    batch_size: int | None = None,
    drain: str = WEAVE_DRAIN,
    label: str = "weave",
) -> Throughput:
    """Weave's fenced batch drain (or a bench variant of it) on a fresh cluster with `workers` workers."""
    from django.db import transaction
    from django_q.tasks import async_task

    from notifications.models import Notification

    harness.reset_tables()
    run.start_cluster(workers=workers, push_batch_size=batch_size)

    def load() -> float:
        with transaction.atomic():
            Notification.objects.bulk_create(harness.build_rows(n, due=True), batch_size=1000)
            # One drain per worker, as a burst of notification_create calls would keep them coming
            # (`enqueue_drain` coalesces to one waiting drain; each picked one lets the next in).
            for _ in range(workers):
                async_task(drain, group="bench-weave")
        return time.monotonic()

    try:
        return _measure(run, label, n, workers, batch_size, load)
    finally:
        run.stop_clusters()


# --- scenarios -------------------------------------------------------------------------------------


def scenario_throughput(results: Results, args: Any) -> None:
    """Weave against the one-task-per-notification baseline, same W, at 0 and 50 ms provider latency."""
    rows = []
    for latency in (0, 50):
        with harness.bench() as run:
            run.start_provider(latency)
            weave = weave_throughput(run, n=args.n, workers=args.workers)
            baseline = baseline_throughput(run, n=args.n, workers=args.workers)
            results.baseline_nosave[latency] = baseline_throughput(run, n=args.n, workers=args.workers, save=False)
            if latency == 50:
                # The change recommended to the app, measured beside the rest (bench/variants.py).
                results.group_finish = weave_throughput(
                    run, n=args.n, workers=args.workers, drain=GROUP_FINISH_DRAIN, label="group-finish"
                )
        rows.append((latency, weave, baseline))
    results.throughput = rows


def scenario_fencing(results: Results, args: Any) -> None:
    """Fenced against unfenced (bench-only variant), provider at 0 ms, alternating to share the noise.

    Whole-run rates, a few pairs: too coarse for 5 % on a shared machine; `bench/fencing.py` measures
    CPU, statements and rows per push in many short interleaved rounds instead."""
    pairs = []
    with harness.bench() as run:
        run.start_provider(0)
        for _ in range(args.repeats):
            fenced = weave_throughput(run, n=args.n, workers=args.workers, label="fenced")
            unfenced = weave_throughput(run, n=args.n, workers=args.workers, drain=UNFENCED_DRAIN, label="unfenced")
            pairs.append((fenced, unfenced))
    results.fencing = pairs


def scenario_scaling(results: Results, args: Any) -> None:
    """Throughput at W = 1, 2, 4 (default batch) and at batch sizes 10, 100, 500 (W = 2), 50 ms latency."""
    from weave.conf import weave_settings

    default_batch = weave_settings.PUSH_BATCH_SIZE
    points: dict[tuple[int, int], Throughput] = {}
    with harness.bench() as run:
        run.start_provider(50)
        for workers, batch in [(1, default_batch), (2, default_batch), (4, default_batch), (2, 10), (2, 500)]:
            if (workers, batch) not in points:
                points[(workers, batch)] = weave_throughput(run, n=args.n, workers=workers, batch_size=batch)
    results.scaling = points
    results.default_batch = default_batch


def scenario_queries(results: Results, args: Any) -> None:
    """Statements, transactions and round trips per delivered notification, counted in-process."""
    from django.conf import settings
    from django.db import transaction
    from django_q.tasks import async_task

    from bench.baseline import send_push
    from bench.querycount import CountQueries
    from notifications.delivery import drain
    from notifications.models import Notification
    from weave.conf import weave_settings

    n = min(args.n, 2000)
    out = {}
    with harness.bench() as run:
        provider = run.start_provider(0)
        original = settings.WEAVE
        settings.WEAVE = {**original, "PUSH_URL": provider.push_url}
        try:
            # Weave: one in-process drain over a backlog of n (claims, loads, finishes, renewals).
            harness.reset_tables()
            Notification.objects.bulk_create(harness.build_rows(n, due=True), batch_size=1000)
            with CountQueries() as counts:
                drain(enqueue_more=False)
            delivered = Notification.objects.filter(status="delivered").count()
            out["weave"] = (counts, delivered, f"drain of {n}, batch {weave_settings.PUSH_BATCH_SIZE}")

            # Baseline: the task body for each row, plus the enqueue each row needs.
            harness.reset_tables()
            rows = Notification.objects.bulk_create(harness.build_rows(n, due=False), batch_size=1000)
            with CountQueries() as counts:
                for row in rows:
                    send_push(row.pk)
            delivered = Notification.objects.filter(status="delivered").count()
            out["baseline"] = (counts, delivered, f"{n} × send_push (task body only)")
            with CountQueries() as counts, transaction.atomic():
                for row in rows[:100]:
                    async_task(BASELINE_TASK, row.pk, group="bench-queries")
            out["baseline_enqueue"] = (counts, 100, "100 × async_task inside one transaction")
        finally:
            settings.WEAVE = original
    results.queries = out


def scenario_profile(results: Results, args: Any) -> None:
    """Profile one in-process drain with pyinstrument, at 0 ms (database-bound) and 50 ms latency."""
    from django.conf import settings

    from notifications.delivery import drain
    from notifications.models import Notification

    try:
        from pyinstrument import Profiler
    except ImportError:
        results.profiles = {"-": (0, 0.0, "pyinstrument is not installed (pip install -r bench/requirements.txt).")}
        return
    n = min(args.n, 2000)
    for latency in (0, 50):
        with harness.bench() as run:
            provider = run.start_provider(latency)
            original = settings.WEAVE
            settings.WEAVE = {**original, "PUSH_URL": provider.push_url}
            try:
                harness.reset_tables()
                Notification.objects.bulk_create(harness.build_rows(n, due=True), batch_size=1000)
                profiler = Profiler(interval=0.001)
                started = time.monotonic()
                with profiler:
                    drain(enqueue_more=False)
                seconds = time.monotonic() - started
            finally:
                settings.WEAVE = original
        text = profiler.output_text(unicode=False, color=False, show_all=False)
        results.profiles[f"{latency} ms"] = (n, seconds, text)
        if not args.no_write:
            (harness.PROJECT_ROOT / "bench" / "results" / f"profile-{latency}ms.txt").write_text(text)


def scenario_recovery(results: Results, args: Any) -> None:
    """SIGKILL the cluster holding a full batch mid-send; time until another cluster finished those rows."""
    from django.db import transaction
    from django_q.tasks import async_task

    from notifications.models import Notification
    from notifications.services import notification_create

    batch = 100
    rows_out = []
    for ttl in args.ttls:
        with harness.bench() as run:
            # A batch of 100 at 20 in flight takes ~1 s at 200 ms: the kill lands a quarter in.
            run.start_provider(RECOVERY_LATENCY_MS)
            harness.reset_tables()
            # Two identical clusters; whichever picks up the drain is the victim.
            clusters = [run.start_cluster(workers=2, push_lease_ttl=ttl, push_batch_size=batch) for _ in range(2)]
            with transaction.atomic():
                ids = [r.pk for r in Notification.objects.bulk_create(harness.build_rows(batch, due=True))]
                async_task(WEAVE_DRAIN, group="bench-recovery")
            ours = Notification.objects.filter(pk__in=ids)

            def mid_send(ours=ours) -> bool:
                # Finished rows are released (owner cleared); the rest must all still be held.
                pending = ours.filter(status="pending")
                started = ours.filter(status="delivered").exists()
                return started and pending.exists() and not pending.filter(owner__isnull=True).exists()

            harness.wait_until(mid_send, timeout=60, interval=0.02, message="a cluster to be mid-batch")
            owner = ours.filter(owner__isnull=False).values_list("owner", flat=True).first()
            victim = _cluster_of(owner, clusters)
            rescuer = next(c for c in clusters if c is not victim)
            held = ours.filter(status="pending").count()
            run.groups.kill(victim)
            killed = time.monotonic()
            lease_left = _lease_left(ids)
            # Steady traffic: one new notification a second, each enqueueing a drain through the
            # public API, as a live site would. Without it only the minute sweep would come by.
            next_traffic = killed
            while ours.filter(status="pending").exists():
                if time.monotonic() >= next_traffic:
                    notification_create(device_token="bench-traffic", title="traffic", body="")
                    next_traffic += 1.0
                if time.monotonic() - killed > ttl + 120:
                    raise TimeoutError(f"rows still pending {ttl + 120:.0f} s after the kill")
                time.sleep(0.05)
            recovered = time.monotonic() - killed
            stats = run.provider.stats()
            per_key = stats.get("per_key", {})
            keys = {str(k) for k in ours.values_list("idempotency_key", flat=True)}
            resent = sum(1 for k in keys if per_key.get(k, 0) > 1)
            rows_out.append(
                {
                    "ttl": ttl,
                    "held": held,
                    "lease_left": lease_left,
                    "recovered": recovered,
                    "resent_keys": resent,
                    "unique": sum(1 for k in keys if k in set(stats.get("delivered_keys", []))),
                    "rescuer_alive": rescuer.alive(),
                }
            )
            print(
                f"   TTL {ttl:g} s: killed holding {held} pending rows ({lease_left:.1f} s of lease left); "
                f"all finished {recovered:.1f} s after the kill; {resent} keys sent twice",
                flush=True,
            )
    results.recovery = rows_out


def _cluster_of(owner: str, clusters: list) -> Any:
    """The cluster whose process group runs the worker named in `owner` (push:<host>:<pid>:<tag>)."""
    pid = int(owner.split(":")[2])
    for child in clusters:
        if pid == child.pgid or pid in child.descendants():
            return child
    raise RuntimeError(f"No cluster runs pid {pid} (owner {owner!r}).")


def _lease_left(ids: list[int]) -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXTRACT(EPOCH FROM max(lease_expires_at) - clock_timestamp()) "
            "FROM weave_notifications_notification WHERE id = ANY(%s) AND status = 'pending'",
            [ids],
        )
        value = cursor.fetchone()[0]
    return float(value or 0.0)


def median(values: list[float]) -> float:
    return statistics.median(values)


# --- providers (issue 11) ------------------------------------------------------------------------------

BACKENDS_LATENCY_MS = 50


@dataclass
class BackendPoint:
    alias: str
    n: int
    seconds: float
    statuses: dict[str, int]
    http_versions: dict[str, int]
    connections: int
    max_in_flight: int
    credential_fetches: str  # FCM token requests / APNs provider tokens seen / "-"

    @property
    def rate(self) -> float:
        return self.n / self.seconds


def scenario_backends(results: Results, args: Any) -> None:
    """One in-process drain per backend against its local fake (child processes, 50 ms latency).

    The same worker, batch size and concurrency for each; what differs is the protocol: HTTP/1.1 JSON for
    the webhook, HTTP/2 with OAuth2 (FCM), a provider JWT (APNs), or per-message encryption (Web Push).
    """
    import json
    import uuid

    from django.conf import settings
    from django.utils import timezone

    from notifications.backends.credentials import forget_shared
    from notifications.delivery import drain
    from notifications.models import Notification

    n = max(100, args.n // 5)
    with harness.bench() as run:
        provider = run.start_provider(BACKENDS_LATENCY_MS)
        directory = harness.log_dir() / "push-fakes"
        backends_file = directory / "push_backends.json"
        backends_file.unlink(missing_ok=True)
        ports = [harness.free_port() for _ in range(3)]
        command = [
            *harness.provider_command(0, 0)[:2], "fake_push_services", "--dir", str(directory),
            "--fcm-port", str(ports[0]), "--apns-port", str(ports[1]), "--webpush-port", str(ports[2]),
            "--latency-ms", str(BACKENDS_LATENCY_MS),
        ]  # fmt: skip
        child = run.groups.start("push-fakes", command)
        harness.wait_until(lambda: backends_file.exists() or not child.alive(), timeout=60, message="the fakes")
        if not child.alive():
            raise RuntimeError(f"fake_push_services exited:\n{child.log_tail()}")
        configured = json.loads(backends_file.read_text())
        tokens = json.loads((directory / "sample_tokens.json").read_text())["live"]
        tokens["default"] = "bench-device"
        ca = configured["fcm"]["OPTIONS"]["ca_file"]
        stats_urls = {
            "default": f"{provider.base_url}/_stats",
            "fcm": f"{configured['fcm']['OPTIONS']['base_url']}/_stats",
            "apns": f"https://{configured['apns']['OPTIONS']['host']}/_stats",
            "webpush": f"https://127.0.0.1:{ports[2]}/_stats",
        }
        previous = getattr(settings, "WEAVE", {})
        settings.WEAVE = {
            **previous,
            "PUSH_URL": provider.push_url,
            "PUSH_TIMEOUT": 10.0,
            "PUSH_BACKENDS": configured,
        }
        try:
            for alias in ("default", "fcm", "apns", "webpush"):
                harness.reset_tables()
                forget_shared()  # each backend starts without a token, as a fresh worker process would
                now = timezone.now()
                Notification.objects.bulk_create(
                    Notification(
                        device_token=tokens[alias], backend=alias, title="Weave bench", body=f"Notification {i}",
                        data={"i": str(i)}, idempotency_key=uuid.uuid4(), next_attempt_at=now,
                    )
                    for i in range(n)
                )  # fmt: skip
                before = _fake_stats(stats_urls[alias], ca)
                started = time.monotonic()
                drain(enqueue_more=False, budget=600)
                seconds = time.monotonic() - started
                after = _fake_stats(stats_urls[alias], ca)
                statuses = dict(harness.status_counts())
                fetches = {"fcm": "token_requests", "apns": "provider_tokens"}.get(alias)
                point = BackendPoint(
                    alias=alias, n=n, seconds=seconds, statuses=statuses,
                    http_versions=after.get("http_versions", {"1.1": after.get("requests", 0)}),
                    connections=after.get("connections", 0) - before.get("connections", 0) if alias != "default" else 0,
                    max_in_flight=after.get("max_in_flight", 0),
                    credential_fetches=str(after.get(fetches, 0) - before.get(fetches, 0)) if fetches else "-",
                )  # fmt: skip
                results.backends.append(point)
                print(f"   {alias}: {point.rate:,.0f}/s {statuses}", flush=True)
        finally:
            settings.WEAVE = previous


def _fake_stats(url: str, ca: str) -> dict[str, Any]:
    import ssl

    import httpx

    verify: Any = ssl.create_default_context(cafile=ca) if url.startswith("https") else True
    return httpx.get(url, verify=verify, timeout=30).json()

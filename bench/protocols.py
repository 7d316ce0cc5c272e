"""Bench-only: the push worker on each protocol (webhook, FCM, APNs, Web Push), side by side with an anchor.

    BENCH_DATABASE_URL=postgres://... python bench/protocols.py --n 2000 [--latency 0,50] [--rounds 3] [--json out.json]

For each provider latency it starts the local fakes in child processes (the webhook fake, and the FCM,
APNs and Web Push fakes speaking HTTP/2 over TLS), then for each backend loads N due rows and runs one
`drain()` in this process: the worker's code path without django-q2 around it. It reports the rate,
this process's CPU (every thread: the worker's, the sender's loop, the completer's; not the bench's own
CPU sampler) per 1,000 pushes, the CPU of the bench database's PostgreSQL backends and of the fakes
(which share the same two cores). Before each system's run the heap is settled as a `qcluster`
worker's is after its start (`weave.heap.settle`), for every system alike.

With `--cluster`, FCM and APNs also go the product path: a bulk `notification_create` whose commit asks
for a drain, and real `qcluster` processes (2 workers, the ORM broker) with the fakes' backends
(`WEAVE_PUSH_BACKENDS_FILE`), their CPU read from every process of the cluster. `BENCH_CLUSTER_WORKERS`
(default 2) and `BENCH_CLUSTER_ALIASES` (default "fcm,apns") change which clusters run.

The FCM fake allows `BENCH_FCM_STREAMS` streams on a connection (default 100, as FCM's front ends do),
so every FCM client meets the limit the real service sets: firebase-admin's httpx keeps one connection
and queues the rest of its batch, Weave opens connections up to its window. The other fakes allow 1,000.

"fcm-httpx" and "apns-httpx" are the same backends on httpx's HTTP/2 stack (`bench/h2_variants.py`),
the path they took before the lean HTTP/2 client: before and after, side by side in one run.

After each latency's rows it prints each target it can judge: Weave's rate over the anchor's, the rate
the target asks for, and two ceilings of Weave's row, the fastest rates its CPU per push allows: the
fake's and PostgreSQL's alone (every core filled, and the fakes' one process on one core at most: no
system passes it on this machine), and with Weave's worker added (its processes on a core each at most:
only less CPU per push passes it). Below both, a miss leaves room.

Anchors, measured in the same run against the same fakes:
- firebase-admin's `send_each_async` in batches of 500 (FCM), no persistence;
- the fcm-django pattern: fcm-django sends through firebase-admin's synchronous `send_each`, 500
  messages per call (each call runs a thread per message); here two worker threads (a Celery worker's
  two processes) each take a task of 500 rows, call `send_each`, and write the outcome of the 500 rows
  back in one UPDATE, as the site's task would;
- aioapns with 500 sends in flight (APNs), no persistence: django-push-notifications gathers a bulk
  send's requests at once;
- "webpush-alone" (not in the default list; name it in BENCH_ANCHOR_LIST): the Web Push backend's
  `send()` alone, like "fcm-alone" and "apns-alone";
- pywebpush in a task per subscription: 2 x 20 worker threads (a tuned Celery's), each task calling
  `pywebpush.webpush()` (encryption, VAPID, one HTTPS POST through a reused requests session per
  thread) and marking its row delivered with one UPDATE.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402
from bench.product import CpuMeter, GroupPids, backend_pids, group_pids, proc_cpu  # noqa: E402
from weave import heap  # noqa: E402

ALIASES = tuple(os.environ.get("BENCH_ALIASES", "default,fcm,fcm-httpx,apns,apns-httpx,webpush").split(","))
ANCHORS = tuple(
    os.environ.get(
        "BENCH_ANCHOR_LIST",
        "fcm-alone,fcm-httpx-alone,firebase-admin,fcm-django,apns-alone,apns-httpx-alone,aioapns,pywebpush",
    ).split(",")
)
# The anchors' own windows, whatever Weave's is: django-push-notifications gathers a bulk APNs send on
# aioapns all at once (batches of 500 here, like firebase-admin's); a tuned Celery runs 2 x 20 threads.
AIOAPNS_WINDOW = 500
# Workers per cluster in the product-path rows (`--cluster`). Web Push is left out there: its fake listens on
# loopback, which a production start (the clusters run with DEBUG off) never lets a Web Push endpoint use.
CLUSTER_WORKERS = int(os.environ.get("BENCH_CLUSTER_WORKERS", "2"))
CLUSTER_ALIASES = tuple(os.environ.get("BENCH_CLUSTER_ALIASES", "fcm,apns").split(","))
CELERY_THREADS = 40
# Streams the FCM fake allows on a connection: 100, as FCM's own front ends announce (a client that
# wants more in flight opens more connections); BENCH_FCM_STREAMS=1000 is the fake's default elsewhere.
FCM_STREAMS = int(os.environ.get("BENCH_FCM_STREAMS", "100"))
VARIANTS = {"fcm-httpx": ("fcm", "bench.h2_variants.HttpxFCM"), "apns-httpx": ("apns", "bench.h2_variants.HttpxAPNs")}


def _cpu(pids: set[int]) -> float:
    return sum(proc_cpu(pids).values())


def _measured(
    system: str, n: int, fakes: list[Any], work: Any, *, window: str, database: bool, workers: list[Any] | None = None
) -> dict[str, Any]:
    """Run `work()` -> (delivered, result writes[, seconds it timed itself]) once, timed, with the workers'
    CPU (this process's, or every process of `workers`), the fakes' and (`database`) PostgreSQL's per 1,000
    sends: the one measurement every system in the table gets. A result write is one transaction that
    recorded answers (a Weave finish group, a task's UPDATE); 0 where nothing counts them."""
    fake = group_pids(fakes)
    sampled: dict[str, Any] = {"postgres": backend_pids} if database else {}
    if workers:
        sampled["workers"] = GroupPids(workers)
    # With workers of their own, this process's connection only watches the run: not counted.
    meter = CpuMeter(sampled, exclude_own_backend=bool(workers))
    # As a qcluster worker's heap is after its start (weave.heap, on post_spawn and after the warm-up):
    # what earlier systems and the setup left alive is frozen, so a full collection during the run walks
    # only what this run makes, for every system alike. Outside the timed part.
    heap.settle()
    meter.start()
    fake0, cpu0, t0 = _cpu(fake), time.process_time(), time.perf_counter()
    delivered, groups, *timed = work()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if timed:  # the work timed itself (from its rows' commit)
        wall = timed[0]
    meter.stop()
    # This process's CPU less the meter's own sampling thread, which no worker runs.
    cpu = meter.used["workers"] if workers else cpu - meter.own_cpu
    return {
        "system": system,
        "n": n,
        "delivered": delivered,
        "rate": n / wall,
        "worker_cpu_per_1000": cpu / n * 1000,
        "postgres_cpu_per_1000": meter.used.get("postgres", 0.0) / n * 1000,
        "fake_cpu_per_1000": (_cpu(fake) - fake0) / n * 1000,
        "groups": groups,
        "window": window,
    }


def _firebase_app(options: dict[str, Any], name: str) -> Any:
    """A firebase-admin app pointed at the FCM fake, as both firebase-admin anchors use it."""
    import firebase_admin
    from firebase_admin import credentials, messaging

    # The client trusts the fake's CA the standard way (httpx and requests read these variables).
    os.environ["SSL_CERT_FILE"] = os.environ["REQUESTS_CA_BUNDLE"] = options["ca_file"]
    messaging._MessagingService.FCM_URL = options["base_url"] + "/v1/projects/{0}/messages:send"
    # The fake grants only the messaging scope (the one FCM's send needs); firebase-admin asks for a list.
    credentials._scopes = ["https://www.googleapis.com/auth/firebase.messaging"]
    return firebase_admin.initialize_app(
        credentials.Certificate(options["credentials_file"]), {"projectId": options["project_id"]}, name=name
    )


def _start_fakes(run: harness.Bench, latency: int) -> tuple[Any, dict[str, Any], dict[str, str], Path]:
    directory = harness.log_dir() / f"protocol-fakes-{latency}"
    backends_file = directory / "push_backends.json"
    backends_file.unlink(missing_ok=True)
    ports = [harness.free_port() for _ in range(3)]
    command = [
        *harness.provider_command(0, 0)[:2], "fake_push_services", "--dir", str(directory),
        "--fcm-port", str(ports[0]), "--apns-port", str(ports[1]), "--webpush-port", str(ports[2]),
        "--latency-ms", str(latency), "--fcm-max-streams", str(FCM_STREAMS),
    ]  # fmt: skip
    child = run.groups.start(f"protocol-fakes-{latency}", command)
    harness.wait_until(lambda: backends_file.exists() or not child.alive(), timeout=60, message="the fakes")
    if not child.alive():
        raise RuntimeError(f"fake_push_services exited:\n{child.log_tail()}")
    configured = json.loads(backends_file.read_text())
    tokens = json.loads((directory / "sample_tokens.json").read_text())["live"]
    return child, configured, tokens, directory


def _weave(alias: str, n: int, token: str, fakes: list[Any]) -> dict[str, Any]:
    from notifications.delivery import drain

    harness.load_protocol_rows(alias, n, token)

    def work() -> tuple[int, int]:
        report = drain(enqueue_more=False, budget=600)
        return harness.status_counts().get("delivered", 0), report.groups

    return _measured(f"weave {alias}", n, fakes, work, window=str(_window(alias)), database=True)


def _window(alias: str) -> int:
    """Weave's window on backend `alias` as configured (PUSH_HTTP2_CONCURRENCY or PUSH_CONCURRENCY)."""
    from notifications.backends.registry import backend_class, backend_configs, default_window

    return default_window(backend_class(backend_configs()[alias]["BACKEND"]))


def _weave_cluster(run: Any, alias: str, n: int, token: str, fakes: list[Any], backends_file: Path) -> dict[str, Any]:
    """The product path: a site's bulk send of N pushes to `alias` (`notification_create` N times in one
    transaction, whose commit asks for a drain) into real `qcluster` processes (CLUSTER_WORKERS workers,
    the ORM broker), timed from that commit until none is pending. CPU: every process of the cluster."""
    from django.db import transaction

    from notifications.services import notification_create

    harness.reset_tables()
    cluster = run.start_cluster(workers=CLUSTER_WORKERS, push_backends_file=str(backends_file))

    def work() -> tuple[int, int, float]:
        with transaction.atomic():
            for i in range(n):
                notification_create(
                    device_token=token, backend=alias, title="Weave bench", body=f"Notification {i}", data={"i": str(i)}
                )
            t0 = time.monotonic()
        seconds, _ = harness.wait_for_terminal(n, t0=t0, timeout=max(180, n / 5), interval=0.02)
        return harness.status_counts().get("delivered", 0), 0, seconds

    window = f"{CLUSTER_WORKERS} x {_window(alias)}"
    try:
        row = _measured(f"weave {alias}, qcluster", n, fakes, work, window=window, database=True, workers=[cluster])
        return {**row, "worker_processes": CLUSTER_WORKERS}
    finally:
        run.stop_clusters()


def _backend_only(alias: str, n: int, configured: dict[str, Any], token: str, fakes: list[Any], window: int):
    """The backend's `send()` alone, `window` in flight, no database and no worker: the transport's own cost,
    comparable with the anchors that persist nothing (firebase-admin, aioapns)."""
    from django.utils.module_loading import import_string

    from notifications.backends.base import PushMessage
    from notifications.backends.credentials import forget_shared

    forget_shared()
    entry = configured[alias]
    backend = import_string(entry["BACKEND"])(alias=alias, options=entry["OPTIONS"], timeout=10.0, concurrency=window)
    messages = [
        PushMessage(idempotency_key=str(uuid.uuid4()), token=token, title="Weave bench", body=f"Notification {i}",
                    data={"i": str(i)}, backend=alias)
        for i in range(n)
    ]  # fmt: skip

    async def send_all() -> int:
        slots = asyncio.Semaphore(window)

        async def one(message: PushMessage) -> bool:
            async with slots:
                return (await backend.send(message)).outcome == "delivered"

        try:
            return sum(await asyncio.gather(*(one(m) for m in messages)))
        finally:
            await backend.aclose()

    system = f"{alias} backend alone, {window} in flight"
    return _measured(system, n, fakes, lambda: (asyncio.run(send_all()), 0), window=str(window), database=False)


def _firebase_admin(n: int, configured: dict[str, Any], token: str, fakes: list[Any]) -> dict[str, Any]:
    """firebase-admin 7's `send_each_async`, batches of 500, against the FCM fake: no database at all."""
    from firebase_admin import messaging

    app = _firebase_app(configured["fcm"]["OPTIONS"], f"bench-{uuid.uuid4().hex[:8]}")
    batch = [
        messaging.Message(
            token=token, notification=messaging.Notification(title="Weave bench", body=f"Notification {i}"),
            data={"i": str(i)},
        )
        for i in range(n)
    ]  # fmt: skip

    async def send_all() -> int:
        ok = 0
        for start in range(0, n, 500):
            response = await messaging.send_each_async(batch[start : start + 500], app=app)
            ok += response.success_count
        return ok

    # (No delete_app: it closes the async client after its loop is gone. One app per run is fine.)
    system = "firebase-admin send_each_async"
    return _measured(system, n, fakes, lambda: (asyncio.run(send_all()), 0), window="500 per batch", database=False)


def _load_rows(alias: str, n: int, token: str) -> list[int]:
    from django.utils import timezone

    from notifications.models import Notification

    harness.reset_tables()
    now = timezone.now()
    rows = Notification.objects.bulk_create(
        Notification(
            device_token=token, backend=alias, title="Weave bench", body=f"Notification {i}", data={"i": str(i)},
            idempotency_key=uuid.uuid4(), next_attempt_at=now,
        )
        for i in range(n)
    )  # fmt: skip
    return [row.pk for row in rows]


def _mark_delivered(pks: list[int]) -> None:
    """The anchor task's own write: its rows marked delivered in one statement (a result row each)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE weave_notifications_notification SET status = 'delivered' WHERE id = ANY(%s)", [pks])


def _fcm_django(n: int, configured: dict[str, Any], token: str, fakes: list[Any]) -> dict[str, Any]:
    """The fcm-django way: tasks of 500 rows, each one `messaging.send_each` call and one UPDATE; 2 threads."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection
    from firebase_admin import messaging

    app = _firebase_app(configured["fcm"]["OPTIONS"], f"bench-django-{uuid.uuid4().hex[:8]}")
    pks = _load_rows("fcm", n, token)
    tasks = [pks[start : start + 500] for start in range(0, n, 500)]

    def task(chunk: list[int]) -> int:
        try:
            batch = [
                messaging.Message(
                    token=token, notification=messaging.Notification(title="Weave bench", body=f"Notification {pk}"),
                    data={"i": str(pk)},
                )
                for pk in chunk
            ]  # fmt: skip
            response = messaging.send_each(batch, app=app)
            _mark_delivered([pk for pk, r in zip(chunk, response.responses, strict=True) if r.success])
            return response.success_count
        finally:
            connection.close()

    def work() -> tuple[int, int]:
        with ThreadPoolExecutor(2) as pool:
            sum(pool.map(task, tasks))
        return harness.status_counts().get("delivered", 0), len(tasks)

    system = "fcm-django pattern (send_each)"
    return _measured(system, n, fakes, work, window="2 tasks x 500 threads", database=True)


def _pywebpush(n: int, configured: dict[str, Any], token: str, fakes: list[Any], threads: int) -> dict[str, Any]:
    """pywebpush in a task per subscription, `threads` worker threads, each task one UPDATE of its row."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests
    from django.db import connection
    from pywebpush import webpush

    options = configured["webpush"]["OPTIONS"]
    os.environ["REQUESTS_CA_BUNDLE"] = options["ca_file"]
    key = Path(options["vapid_private_key_file"]).read_text()
    from py_vapid import Vapid02

    vapid = Vapid02.from_pem(key.encode())
    claims = {"sub": options["vapid_subject"]}
    info = json.loads(token)
    pks = _load_rows("webpush", n, token)
    local = threading.local()

    def task(pk: int) -> bool:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        payload = json.dumps({"title": "Weave bench", "body": f"Notification {pk}", "data": {"i": str(pk)}})
        response = webpush(
            info, payload, vapid_private_key=vapid, vapid_claims=dict(claims), ttl=3600, timeout=10,
            requests_session=session,
        )  # fmt: skip
        ok = getattr(response, "status_code", 0) in (200, 201, 202)
        if ok:
            _mark_delivered([pk])
        return ok

    def work() -> tuple[int, int]:
        with ThreadPoolExecutor(threads) as pool:
            sum(pool.map(task, pks))
            # each thread's Django connection is closed on that thread
            list(pool.map(lambda _: connection.close(), range(threads)))
        return harness.status_counts().get("delivered", 0), 0

    system = f"pywebpush, task per subscription, {threads} threads"
    return _measured(system, n, fakes, work, window=str(threads), database=True)


def _aioapns(n: int, configured: dict[str, Any], token: str, fakes: list[Any], window: int) -> dict[str, Any]:
    """aioapns (what django-push-notifications uses), `window` sends in flight, against the APNs fake."""
    import ssl

    from aioapns import APNs, NotificationRequest, PushType
    from aioapns.connection import APNsBaseClientProtocol, APNsProductionClientProtocol

    options = configured["apns"]["OPTIONS"]
    host, port = options["host"].rsplit(":", 1)
    # aioapns dials Apple's host on 443; point its protocol at the fake instead.
    APNsProductionClientProtocol.APNS_SERVER, APNsProductionClientProtocol.APNS_PORT = host, int(port)
    # The fake's HTTP/2 server ends a 200 with an empty DATA frame (Apple ends it on the HEADERS frame),
    # which aioapns would parse as JSON: skip empty frames, nothing else changes.
    parse = APNsBaseClientProtocol.on_data_received
    if not getattr(parse, "bench_tolerant", False):

        def tolerant(self: Any, raw_data: bytes, stream_id: int) -> None:
            if raw_data:
                parse(self, raw_data, stream_id)

        tolerant.bench_tolerant = True  # type: ignore[attr-defined]
        APNsBaseClientProtocol.on_data_received = tolerant  # type: ignore[method-assign]
    key = Path(options["key_file"]).read_text()

    async def send_all() -> int:
        client = APNs(
            key=key, key_id=options["key_id"], team_id=options["team_id"], topic=options["topic"],
            ssl_context=ssl.create_default_context(cafile=options["ca_file"]), max_connections=1,
        )  # fmt: skip
        slots = asyncio.Semaphore(window)

        async def one(i: int) -> bool:
            request = NotificationRequest(
                device_token=token, message={"aps": {"alert": {"title": "Weave bench", "body": f"Notification {i}"}}},
                notification_id=str(uuid.uuid4()), push_type=PushType.ALERT,
            )  # fmt: skip
            async with slots:
                return (await client.send_notification(request)).is_successful

        return sum(await asyncio.gather(*(one(i) for i in range(n))))

    system = f"aioapns, {window} in flight"
    return _measured(system, n, fakes, lambda: (asyncio.run(send_all()), 0), window=str(window), database=False)


def run_latency(latency: int, n: int, concurrency: int | None, *, cluster: bool = False) -> list[dict[str, Any]]:
    from django.conf import settings

    rows = []
    with harness.bench() as run:
        provider = run.start_provider(latency)
        child, configured, tokens, directory = _start_fakes(run, latency)
        tokens["default"] = "bench-device"
        for alias, (base, dotted) in VARIANTS.items():
            configured[alias] = {**configured[base], "BACKEND": dotted}
            tokens[alias] = tokens[base]
        previous = getattr(settings, "WEAVE", {})
        # The fakes listen on loopback, which the Web Push destination policy refuses unless told otherwise.
        settings.WEAVE = {**previous, "PUSH_URL": provider.push_url, "PUSH_TIMEOUT": 10.0, "PUSH_BACKENDS": configured,
                          "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True}  # fmt: skip
        if concurrency:
            settings.WEAVE.update(
                PUSH_CONCURRENCY=concurrency, PUSH_HTTP2_CONCURRENCY=concurrency, PUSH_BATCH_SIZE=2 * concurrency
            )
        fakes = {"default": [provider.child]} | {alias: [child] for alias in ("fcm", "apns", "webpush", *VARIANTS)}
        try:
            for alias in ALIASES:
                row = _weave(alias, n, tokens[alias], fakes[alias])
                row["latency_ms"] = latency
                rows.append(row)
                _print(row)
            for alias in CLUSTER_ALIASES if cluster else ():
                row = _weave_cluster(run, alias, n, tokens[alias], fakes[alias], directory / "push_backends.json")
                row["latency_ms"] = latency
                rows.append(row)
                _print(row)
            if os.environ.get("BENCH_ANCHORS", "1") != "0":
                # Each backend alone with Weave's window for it; the anchors with their own natural windows.
                from weave.conf import weave_settings

                window = concurrency or int(weave_settings.PUSH_HTTP2_CONCURRENCY)
                anchors = {
                    **{
                        f"{alias}-alone": (lambda a=alias: _backend_only(a, n, configured, tokens[a], fakes[a], window))
                        for alias in ("fcm", "fcm-httpx", "apns", "apns-httpx", "webpush")
                    },
                    "firebase-admin": lambda: _firebase_admin(n, configured, tokens["fcm"], fakes["fcm"]),
                    "fcm-django": lambda: _fcm_django(n, configured, tokens["fcm"], fakes["fcm"]),
                    "aioapns": lambda: _aioapns(n, configured, tokens["apns"], fakes["apns"], AIOAPNS_WINDOW),
                    "pywebpush": lambda: _pywebpush(n, configured, tokens["webpush"], fakes["webpush"], CELERY_THREADS),
                }
                for row in (anchors[name]() for name in ANCHORS):
                    row["latency_ms"] = latency
                    rows.append(row)
                    _print(row)
        finally:
            settings.WEAVE = previous
    for line in target_lines(rows, os.cpu_count() or 1):
        print(line, flush=True)
    return rows


# The targets: (Weave's row, the anchor's row, how many times the anchor's rate), rows named by prefix.
TARGETS = (
    ("weave fcm", "firebase-admin", 2.0),
    ("weave fcm, qcluster", "firebase-admin", 2.0),
    ("weave fcm", "fcm-django pattern", 1.25),
    ("weave fcm, qcluster", "fcm-django pattern", 1.25),
    ("weave apns", "aioapns", 2.0),
    ("weave apns, qcluster", "aioapns", 2.0),
    ("weave webpush", "pywebpush", 2.0),
)


def ceiling(row: dict[str, Any], cores: int, *, worker: bool = True) -> float:
    """The fastest rate this row's CPU per push allows on these cores.

    Without the worker: what the fake and PostgreSQL leave, which no system passes on this machine: every
    core filled by their CPU, and the fakes' one process (one GIL) on one core at most. With the worker
    (`worker=True`): what this worker can reach, however it waits: its CPU added on the shared cores, and
    its own processes (`worker_processes`, one for a drain in process) on a core each at most."""
    fake, postgres = row["fake_cpu_per_1000"] / 1000, row["postgres_cpu_per_1000"] / 1000
    ours = row["worker_cpu_per_1000"] / 1000 if worker else 0.0
    limits = []
    if fake + postgres + ours > 0:
        limits.append(cores / (fake + postgres + ours))
    if fake > 0:
        limits.append(1 / fake)
    if ours > 0:
        limits.append(row.get("worker_processes", 1) / ours)
    return min(limits, default=float("inf"))


def target_lines(rows: list[dict[str, Any]], cores: int) -> list[str]:
    """Each target this run can judge: the ratio, the rate it asks for, and the two ceilings of Weave's row."""

    def find(prefix: str) -> dict[str, Any] | None:
        exact = [r for r in rows if r["system"] == prefix]
        return (exact or [r for r in rows if r["system"].startswith(prefix)] or [None])[0]

    lines = []
    for weave_name, anchor_name, times in TARGETS:
        ours, anchor = find(weave_name), find(anchor_name)
        if ours is None or anchor is None:
            continue
        wanted, left, top = times * anchor["rate"], ceiling(ours, cores, worker=False), ceiling(ours, cores)
        if ours["rate"] >= wanted:
            verdict = "met"
        elif wanted > left:
            verdict = "missed: above what the fake and PostgreSQL leave, out of any system's reach here"
        elif wanted > top:
            verdict = "missed: above this worker's ceiling; only less CPU per push can reach it"
        else:
            reached, asked = ours["rate"] / top, wanted / top
            verdict = f"missed with room: {reached:.0%} of the worker's ceiling reached, {asked:.0%} asked"
        lines.append(
            f"{ours['latency_ms']:>3} ms  {ours['system']} / {anchor['system']}: {ours['rate'] / anchor['rate']:.2f}"
            f" (target {times:g}: {wanted:,.0f}/s; the fake and PostgreSQL leave {left:,.0f}/s,"
            f" with the worker {top:,.0f}/s) {verdict}"
        )
    return lines


def medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (latency, system): the median of each measured figure over the rounds. The machine's
    speed drifts over minutes, and each system runs at its own moment: the median of interleaved rounds
    is steadier than any one round."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["latency_ms"], row["system"]), []).append(row)
    figures = ("rate", "worker_cpu_per_1000", "postgres_cpu_per_1000", "fake_cpu_per_1000")
    return [
        {
            **same[0],
            **{name: statistics.median(r[name] for r in same) for name in figures},
            "delivered": min(r["delivered"] for r in same),  # the worst round's: one short round shows
            "rounds": len(same),
        }
        for same in groups.values()
    ]


def _print(row: dict[str, Any]) -> None:
    print(
        f"{row['latency_ms']:>3} ms  {row['system']:<32} {row['rate']:>7,.0f}/s"
        f"  delivered {row['delivered']}/{row['n']}"
        f"  worker CPU {row['worker_cpu_per_1000']:.2f} s/1000  PostgreSQL {row['postgres_cpu_per_1000']:.2f}"
        f"  fake {row['fake_cpu_per_1000']:.2f}"
        + (f"  rows per result write {row['delivered'] / row['groups']:.1f}" if row["groups"] else ""),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--latency", default="0,50")
    parser.add_argument(
        "--concurrency", type=int, default=None,
        help="PUSH_CONCURRENCY and PUSH_HTTP2_CONCURRENCY both (default: the settings, 20 and 300)",
    )  # fmt: skip
    parser.add_argument(
        "--cluster", action="store_true", help="also FCM and APNs through real qcluster processes (2 workers)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="run every latency this many times, interleaved, then judge the targets on each row's medians",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    harness.configure()
    rows = []
    for number in range(1, args.rounds + 1):
        for latency in (int(v) for v in args.latency.split(",")):
            for row in run_latency(latency, args.n, args.concurrency, cluster=args.cluster):
                rows.append({**row, "round": number})
    if args.rounds > 1:
        print(f"Medians of {args.rounds} rounds:", flush=True)
        middle = medians(rows)
        for row in middle:
            _print(row)
        for latency in sorted({row["latency_ms"] for row in middle}):
            for line in target_lines([r for r in middle if r["latency_ms"] == latency], os.cpu_count() or 1):
                print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

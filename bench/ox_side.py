"""django-ox's part of bench/stale_writes.py, run by bench/.venv-ox/bin/python (Python 3.12, django-ox 1.9.1).

bench/stale_writes.py calls it and reads one JSON line back; it can also be run alone:

    export OX_DATABASE_URL=postgres://postgres@127.0.0.1:5432/weave_bench_ox
    bench/.venv-ox/bin/python bench/ox_side.py stall process
    bench/.venv-ox/bin/python bench/ox_side.py throughput 10000

`stall process`: a worker process runs the task and stops inside it; the harness freezes the whole
process (SIGSTOP) past its lease, a second worker process takes the task over, then the first is
let go (SIGCONT) and finishes its body. This is how the other systems' workers are stalled in
effect: their stalled worker renews nothing either. django-ox renews every lease from a thread of
its own whatever the task body does, so a stall of the body alone never lets its lease lapse:
`stall body` shows that (no takeover) instead.

`round N` (bench/engine.py): N trivial tasks enqueued in one transaction (timed) and run by the
`ox_worker` processes the harness started; `reset` migrates and empties the tables first.

`throughput N`: N trivial tasks through one django-ox worker (`Worker(batch=True)`, concurrency 1,
the package's loop as `manage.py ox_worker --batch` runs it), timed in this process.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.ox_settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.backends.signals import connection_created  # noqa: E402
from django_ox.models import OxTask  # noqa: E402
from django_ox.worker import Worker  # noqa: E402

from bench import ox_tasks  # noqa: E402
from tools.processes import process_cpu as cpu_seconds  # noqa: E402

LEASE = float(settings.TASKS["default"]["OPTIONS"]["LOCK_TIMEOUT"])


def reset() -> None:
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_ledger (id serial PRIMARY KEY, tag text, writer text)")
        cursor.execute("TRUNCATE bench_ledger")
    OxTask.objects.all().delete()


def _worker_process(writer: str, here: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BENCH_OX_WRITER": writer, "BENCH_OX_DIR": str(here)}
    log = (here / f"{writer}.log").open("wb")
    return subprocess.Popen([sys.executable, __file__, "worker"], env=env, stderr=log, stdout=log)


def _wait_for(path: Path, seconds: float) -> None:
    ends = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < ends, f"{path.name} never appeared"
        time.sleep(0.01)


def stall(mode: str) -> dict[str, Any]:
    """One stale-worker story; `mode` is `process` (the worker frozen) or `body` (only the task body waits)."""
    reset()
    result = ox_tasks.ox_write.enqueue("ox")
    with tempfile.TemporaryDirectory() as name:
        here = Path(name)
        stale = _worker_process("stale", here)
        try:
            _wait_for(here / "stalled", 30)
            if mode == "process":
                os.kill(stale.pid, signal.SIGSTOP)  # every thread stops, its lease renewal too
            time.sleep(LEASE + 0.5)  # stalled past its lease, as the others are
            fresh = _worker_process("fresh", here)
            fresh.wait(60)
        finally:
            if mode == "process":
                os.kill(stale.pid, signal.SIGCONT)
            (here / "resume").touch()
        stale.wait(60)
        stale_log = (here / "stale.log").read_text()
    with connection.cursor() as cursor:
        cursor.execute("SELECT writer FROM bench_ledger WHERE tag = 'ox' ORDER BY id")
        writes = [row[0] for row in cursor.fetchall()]
    row = OxTask.objects.get(pk=result.id)
    return {
        "mode": mode,
        "writes": writes,
        "status": row.status,
        "lease_epoch": row.lease_epoch,
        "attempts": row.attempts,
        "stale_outcome_refused": "lost its lease" in stale_log,
    }


STATEMENTS = [0]  # SQL statements on every connection of this process (BEGIN/COMMIT are not statements here)


def _counting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    STATEMENTS[0] += 1
    return execute(sql, params, many, context)


def _count_on(sender: Any, connection: Any, **kwargs: Any) -> None:
    connection.execute_wrappers.append(_counting)  # the worker's threads open connections of their own


def throughput(n: int) -> dict[str, Any]:
    reset()
    for _ in range(n):
        ox_tasks.ox_noop.enqueue()
    worker = Worker(batch=True, concurrency=1)
    connection.close()
    connection_created.connect(_count_on)
    cpu, started = cpu_seconds(), time.perf_counter()
    worker.run()
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    statements = STATEMENTS[0]
    left = OxTask.objects.exclude(status=OxTask.Status.SUCCESSFUL).count()
    assert left == 0, f"{left} tasks did not succeed"
    return {"n": n, "seconds": elapsed, "cpu_ms_per_task": cpu * 1000 / n, "statements_per_task": statements / n}


def engine_round(n: int) -> dict[str, Any]:
    """bench/engine.py's round: N trivial tasks enqueued in one transaction, run by the `ox_worker`
    processes the harness started; wait until all finished. The enqueue is timed in this process."""
    from django.db import transaction
    from django.db.models import Max

    OxTask.objects.all().delete()
    started = time.perf_counter()
    with transaction.atomic():
        for _ in range(n):
            ox_tasks.ox_noop.enqueue()
        enqueued = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        committed_at = float(cursor.fetchone()[0])
    ends = time.monotonic() + 600
    while OxTask.objects.filter(status=OxTask.Status.SUCCESSFUL).count() < n:
        assert time.monotonic() < ends, "the ox workers did not finish the round"
        time.sleep(0.05)
    last = OxTask.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
    return {"n": n, "enqueue_seconds": enqueued, "seconds": last - committed_at}


def main() -> None:
    command = sys.argv[1]
    if command == "worker":
        Worker(batch=True, concurrency=1).run()
        return
    if command == "reset":
        reset()
        print(json.dumps({}))
        return
    if command == "round":
        print(json.dumps(engine_round(int(sys.argv[2]))))
        return
    out = stall(sys.argv[2]) if command == "stall" else throughput(int(sys.argv[2]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()

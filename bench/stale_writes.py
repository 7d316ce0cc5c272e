"""Bench: a task's worker stalls past its lease, another worker takes over, the stale one wakes and writes.

Counts the stale writes that land with Weave's `django.tasks` backend, django-tasks-db and django-ox,
and times N trivial tasks (default 10,000) through one worker of each, on PostgreSQL. Run:

    make bench-ox-venv   # once: bench/.venv-ox, Python 3.12 with bench/requirements-ox.txt
    export BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/weave_bench
    .venv/bin/python bench/stale_writes.py [N] [--rounds R]

With `--rounds R` every system runs N tasks R times, the order rotating each round, so that none
always runs first on a shared machine; `--only weave,django-tasks-db` leaves the others out.
django-ox needs Python >= 3.12 and the product stays on 3.11, so its part runs in its own venv
(bench/ox_side.py) against its own database (the bench database's name plus `_ox`, or
OX_DATABASE_URL); without that venv its row says so.

django-tasks-db has no lease: a stalled worker's task stays RUNNING for ever, so the only way another
worker takes it over is a person (or a script) setting it back to READY, which this harness does.
"""

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.stale_settings")
if os.environ.get("BENCH_DATABASE_URL"):
    os.environ["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django_tasks_db.management.commands.db_worker import Worker as DBWorker  # noqa: E402
from django_tasks_db.models import DBTaskResult  # noqa: E402

from bench import stale_tasks  # noqa: E402
from tools.processes import process_cpu as cpu_seconds  # noqa: E402
from weave.conf import weave_settings  # noqa: E402
from weave.jobs.runner import run_job  # noqa: E402
from weave.models import TaskRow  # noqa: E402
from weave.tasks.worker import drain  # noqa: E402

OX_PYTHON = ROOT / "bench" / ".venv-ox" / "bin" / "python"
OX_SIDE = ROOT / "bench" / "ox_side.py"
SYSTEMS = ["weave", "django-tasks-db", "django-ox"]


def ledger(tag: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT writer FROM bench_ledger WHERE tag = %s ORDER BY id", [tag])
        return [row[0] for row in cursor.fetchall()]


def _in_thread(name: str, target: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _stall_then(run_stale: Callable[[], object], take_over: Callable[[], object]) -> None:
    stale_tasks.stalled.clear()
    stale_tasks.resume.clear()
    stale = _in_thread("stale", run_stale)
    assert stale_tasks.stalled.wait(30), "the stale worker never reached its task"
    time.sleep(weave_settings.LEASE_TTL + 0.5)  # stalled past its lease
    _in_thread("fresh", take_over).join(60)
    stale_tasks.resume.set()
    stale.join(60)


def weave_scenario() -> list[str]:
    result = stale_tasks.weave_write.enqueue("weave")
    pk = TaskRow.objects.get(result_id=result.id).pk
    _stall_then(lambda: run_job("task", pk, owner="stale"), lambda: run_job("task", pk, owner="fresh"))
    return ledger("weave")


def _db_claim_and_run(worker: str) -> None:
    with transaction.atomic():
        row = DBTaskResult.objects.ready().get_locked()
        assert row is not None
        row.claim(worker)
    row.set_successful(row.task.call(*row.task_result.args, **row.task_result.kwargs))


def db_scenario() -> list[str]:
    stale_tasks.db_write.enqueue("db")

    def take_over() -> None:
        DBTaskResult.objects.filter(status="RUNNING").update(status="READY")  # the only recovery there is
        _db_claim_and_run("fresh")

    _stall_then(lambda: _db_claim_and_run("stale"), take_over)
    return ledger("db")


# --- django-ox, in its own venv ------------------------------------------------------------------


def ox_database_url() -> str:
    """OX_DATABASE_URL, or the bench database's server with the bench database's name plus `_ox`."""
    if os.environ.get("OX_DATABASE_URL"):
        return os.environ["OX_DATABASE_URL"]
    params = connection.settings_dict
    name = f"{params['NAME']}_ox"
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{name}"')
    user = params["USER"] + (f":{params['PASSWORD']}" if params.get("PASSWORD") else "")
    return f"postgres://{user}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}/{name}"


def ox(*args: object) -> dict[str, Any]:
    """Run bench/ox_side.py in the django-ox venv; return the JSON line it prints."""
    env = {**os.environ, "OX_DATABASE_URL": ox_database_url(), "STALE_LEASE_TTL": str(weave_settings.LEASE_TTL)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [str(OX_PYTHON), str(OX_SIDE), *map(str, args)], env=env, capture_output=True, text=True, timeout=7200
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench/ox_side.py {args} failed:\n{done.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# --- throughput ----------------------------------------------------------------------------------


@contextmanager
def measured(n: int, out: dict[str, Any]) -> Iterator[None]:
    """Time the block, count its SQL statements (BEGIN/COMMIT are not statements here) and its CPU."""
    count = [0]

    def counting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counting):
        cpu, started = cpu_seconds(), time.perf_counter()
        yield
        out.update(seconds=time.perf_counter() - started, cpu_ms_per_task=(cpu_seconds() - cpu) * 1000 / n)
    out.update(n=n, statements_per_task=count[0] / n)


def weave_throughput(n: int) -> dict[str, Any]:
    TaskRow.objects.all().delete()
    for _ in range(n):
        stale_tasks.weave_noop.enqueue()
    out: dict[str, Any] = {}
    with measured(n, out):
        while TaskRow.objects.due().exists():
            drain(budget=600)
    return out


def db_throughput(n: int) -> dict[str, Any]:
    DBTaskResult.objects.all().delete()
    for _ in range(n):
        stale_tasks.db_noop.enqueue()
    # The package's own loop, as `manage.py db_worker --batch` runs it (as django-ox runs its own).
    worker = DBWorker(
        queue_names=["*"],
        interval=1.0,
        batch=True,
        backend_name="db",
        startup_delay=False,
        max_tasks=None,
        worker_id="one",
        excluded_queue_names=[],
    )
    out: dict[str, Any] = {}
    with measured(n, out):
        worker.run()
    left = DBTaskResult.objects.exclude(status="SUCCESSFUL").count()
    assert left == 0, f"{left} tasks did not succeed"
    return out


THROUGHPUT: dict[str, Callable[[int], dict[str, Any]]] = {
    "weave": weave_throughput,
    "django-tasks-db": db_throughput,
    "django-ox": lambda n: ox("throughput", n),
}


def throughput(n: int, rounds: int, systems: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every system runs `n` tasks per round; the order rotates, so none always runs first."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    for i in range(rounds):
        for name in systems[i % len(systems) :] + systems[: i % len(systems)]:
            load = os.getloadavg()[0]
            run = THROUGHPUT[name](n)
            run.update(load_before=load, load_after=os.getloadavg()[0], position=i)
            runs[name].append(run)
            print(f"round {i + 1}: {name} {n / run['seconds']:.0f} tasks/s (load {load:.1f})", file=sys.stderr)
    return runs


# --- report --------------------------------------------------------------------------------------


def _rate(runs: list[dict[str, Any]]) -> str:
    total = sum(r["n"] for r in runs) / sum(r["seconds"] for r in runs)
    each = ", ".join(f"{r['n'] / r['seconds']:.0f}" for r in runs)
    return f"{total:.0f}" + (f" ({each})" if len(runs) > 1 else "")


def _per_task(runs: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in runs if r.get(key) is not None]
    return f"{sum(values) / len(values):.2f}" if values else "n/a"


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _ox_writes(story: dict[str, Any]) -> str:
    return ", ".join(story["writes"]) + ("; its finish refused" if story.get("stale_outcome_refused") else "")


def main() -> None:
    args = sys.argv[1:]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 1
    only = args[args.index("--only") + 1].split(",") if "--only" in args else SYSTEMS
    valued = {"--rounds", "--only"}
    positional = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] not in valued)]
    n = int(positional[0]) if positional else 10_000
    started_at, load_at_start, commit = datetime.now(UTC), os.getloadavg(), _commit()
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_ledger (id serial PRIMARY KEY, tag text, writer text)")
        cursor.execute("TRUNCATE bench_ledger")
    TaskRow.objects.all().delete()
    DBTaskResult.objects.all().delete()
    writes = {"weave": weave_scenario(), "django-tasks-db": db_scenario()}
    have_ox = OX_PYTHON.exists() and "django-ox" in only
    systems = [name for name in only if name in SYSTEMS and (have_ox or name != "django-ox")]  # in the order given
    ox_frozen = ox("stall", "process") if have_ox else None
    ox_body = ox("stall", "body") if have_ox else None
    runs = throughput(n, rounds, systems)
    load = os.getloadavg()
    print(
        f"\nCommit {commit}, {started_at:%Y-%m-%d %H:%M} UTC, N = {n}, {rounds} round(s); load average "
        f"{load_at_start[0]:.1f} at the start, {load[0]:.1f} at the end (1 min; {os.cpu_count()} CPUs)\n"
    )
    print(
        "| backend | writes that landed | stale writes that landed | trivial tasks per second | "
        "worker CPU ms per task | SQL statements per task |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    names = {"weave": "weave.tasks.WeaveBackend", "django-tasks-db": "django-tasks-db 0.13.0"}
    for name in [name for name in SYSTEMS[:2] if name in systems]:
        landed = writes[name]
        r = runs[name]
        print(
            f"| {names[name]} | {', '.join(landed)} | {landed.count('stale')} | {_rate(r)} | "
            f"{_per_task(r, 'cpu_ms_per_task')} | {_per_task(r, 'statements_per_task')} |"
        )
    if ox_frozen is None or ox_body is None:
        if "django-ox" in only:
            print(f"| django-ox | not run: {OX_PYTHON} is missing (`make bench-ox-venv`) | | | | |")
        return
    r = runs["django-ox"]
    print(
        f"| django-ox 1.9.1 (worker process frozen) | {_ox_writes(ox_frozen)} | {ox_frozen['writes'].count('stale')} | "
        f"{_rate(r)} | {_per_task(r, 'cpu_ms_per_task')} | {_per_task(r, 'statements_per_task')} |"
    )
    print(
        f"\ndjango-ox, only the task body stalled (the process alive): writes {_ox_writes(ox_body)}; "
        f"status {ox_body['status']}, {ox_body['attempts']} attempt(s): "
        + ("no takeover, its lease was renewed throughout." if ox_body["attempts"] == 1 else "taken over.")
    )
    print("\n" + json.dumps({"runs": runs, "ox": [ox_frozen, ox_body]}))


if __name__ == "__main__":
    main()

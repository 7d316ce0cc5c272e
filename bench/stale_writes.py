"""Bench: a task's worker stalls past its lease, another worker takes over, the stale one wakes and writes.

Counts the stale writes that land with Weave's `django.tasks` backend and with django-tasks-db, and
times N trivial tasks (default 10,000) through each (one in-process worker, PostgreSQL). Run:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/weave_anchor .venv/bin/python bench/stale_writes.py [N]

django-tasks-db has no lease: a stalled worker's task stays RUNNING for ever, so the only way another
worker takes it over is a person (or a script) setting it back to READY, which this harness does.

django-ox, the third anchor, needs Python 3.12 or later (every release on PyPI says so); the harness
says whether it is importable; it has no scenario here yet, so it is not in the table.
"""

import importlib.util
import os
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.stale_settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django_tasks_db.models import DBTaskResult  # noqa: E402

from bench import stale_tasks  # noqa: E402
from weave.conf import weave_settings  # noqa: E402
from weave.jobs.runner import run_job  # noqa: E402
from weave.models import TaskRow  # noqa: E402
from weave.tasks.worker import drain  # noqa: E402


def ledger(tag: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT writer FROM bench_ledger WHERE tag = %s ORDER BY id", [tag])
        return [row[0] for row in cursor.fetchall()]


def _stall_then(run_stale, take_over) -> None:
    stale_tasks.stalled.clear()
    stale_tasks.resume.clear()
    stale = threading.Thread(target=run_stale, name="stale")
    stale.start()
    assert stale_tasks.stalled.wait(30), "the stale worker never reached its task"
    time.sleep(weave_settings.LEASE_TTL + 0.5)  # stalled past its lease
    take_over()
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


def throughput(n: int) -> dict[str, float]:
    out = {}
    for task in [stale_tasks.weave_noop] * n:
        task.enqueue()
    started = time.perf_counter()
    while TaskRow.objects.due().exists():
        drain(budget=600)
    out["weave"] = n / (time.perf_counter() - started)
    for task in [stale_tasks.db_noop] * n:
        task.enqueue()
    started = time.perf_counter()
    while DBTaskResult.objects.ready().exists():
        with transaction.atomic():
            row = DBTaskResult.objects.ready().get_locked()
            if row is None:
                break
            row.claim("one")
        row.set_successful(row.task.call())
    out["django-tasks-db"] = n / (time.perf_counter() - started)
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_ledger (id serial PRIMARY KEY, tag text, writer text)")
        cursor.execute("TRUNCATE bench_ledger")
    TaskRow.objects.all().delete()
    DBTaskResult.objects.all().delete()
    weave = weave_scenario()
    db = db_scenario()
    rates = throughput(n)
    print(f"| backend | writes that landed | stale writes that landed | trivial tasks per second (N={n}) |")
    print("| --- | --- | --- | --- |")
    print(f"| weave.tasks.WeaveBackend | {', '.join(weave)} | {weave.count('stale')} | {rates['weave']:.0f} |")
    print(f"| django-tasks-db 0.13.0 | {', '.join(db)} | {db.count('stale')} | {rates['django-tasks-db']:.0f} |")
    if importlib.util.find_spec("django_ox") is None:
        print(f"\ndjango-ox is not importable here (it requires Python >= 3.12; this is {platform.python_version()}).")
    else:
        print("\ndjango-ox is importable, but this harness has no scenario for it yet: it is not in the table.")


if __name__ == "__main__":
    main()

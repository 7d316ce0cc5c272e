"""The tasks of bench/ox_side.py: the same bodies as bench/stale_tasks.py's, for django-ox's worker processes.

django-ox runs tasks in worker processes, so the writer's name comes from the process (BENCH_OX_WRITER)
and the stall is signalled through files in BENCH_OX_DIR instead of thread events.
"""

import os
import time
from pathlib import Path

from django.db import connection
from django_tasks import task


def _writer() -> str:
    return os.environ.get("BENCH_OX_WRITER", "")


def _maybe_stall() -> None:
    if _writer() != "stale":
        return
    here = Path(os.environ["BENCH_OX_DIR"])
    (here / "stalled").touch()  # the harness sees the stale worker inside its task
    ends = time.monotonic() + 60
    while not (here / "resume").exists() and time.monotonic() < ends:
        time.sleep(0.01)


@task()
def ox_write(tag: str) -> str:
    _maybe_stall()
    # django-ox hands a task no lease to write under: the body writes the way a django-tasks-db task does.
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_ledger (tag, writer) VALUES (%s, %s)", [tag, _writer()])
    return tag


@task()
def ox_noop() -> None:
    return None

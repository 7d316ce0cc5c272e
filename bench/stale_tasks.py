"""The tasks of bench/stale_writes.py: each writes one ledger row; the worker thread named "stale" stalls first."""

import os
import threading
import time
from pathlib import Path

from django.db import connection
from django_tasks import task

stalled = threading.Event()  # set when the stale worker is inside its task
resume = threading.Event()  # set by the harness to wake the stale worker up


def _write(tag: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_ledger (tag, writer) VALUES (%s, %s)", [tag, threading.current_thread().name])


def _maybe_stall() -> None:
    if threading.current_thread().name == "stale":
        stalled.set()
        resume.wait(60)


@task(backend="default", takes_context=True)
def weave_write(context, tag: str) -> str:
    _maybe_stall()
    with context.guarded():  # Weave: the guarded update first; a stale lease refuses the block
        _write(tag)
    return tag


@task(backend="db")
def db_write(tag: str) -> str:
    _maybe_stall()
    _write(tag)
    return tag


@task(backend="default")
def weave_noop() -> None:
    return None


@task(backend="db")
def db_noop() -> None:
    return None


def _writer() -> str:
    return os.environ.get("BENCH_WRITER", threading.current_thread().name)


@task(backend="default", takes_context=True)
def weave_stall_write(context, tag: str) -> str:
    """bench/engine.py's stall: the worker process named "stale" waits inside the task until told (by files)."""
    here = os.environ.get("BENCH_STALL_DIR")
    if here and _writer() == "stale":
        (Path(here) / "stalled").touch()
        ends = time.monotonic() + 60
        while not (Path(here) / "resume").exists() and time.monotonic() < ends:
            time.sleep(0.01)
    with context.guarded():  # the guarded update first; a stale lease refuses the block
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO bench_ledger (tag, writer) VALUES (%s, %s)", [tag, _writer()])
    return tag

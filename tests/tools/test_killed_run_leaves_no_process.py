"""A test run that is killed outright (SIGKILL: no atexit, no fixture teardown) leaves no process behind:
the qcluster it started, and that cluster's workers, die with it."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tools.processes import PROJECT_ROOT, process_group, stat_fields, wait_until

pytestmark = pytest.mark.e2e


def alive(pid: int | str) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"  # a zombie has died; only its exit status is left


def group_members(pgid: int) -> list[int]:
    """Live processes of the process group, those forked after the pids were written included."""
    return [
        int(e.name)
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and process_group(e.name) == pgid and alive(e.name)
    ]


def test_sigkilled_pytest_takes_its_qcluster_and_workers_with_it(tmp_path):
    pid_file = tmp_path / "pids.json"
    env = {
        **os.environ,
        "WEAVE_KILLED_RUN_PIDS": str(pid_file),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'killed-run.sqlite3'}",
    }
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/tools/killed_run_target.py"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the SIGKILL below goes to pytest alone, not to a group it shares with us
    )
    pids: list[int] = []
    try:
        wait_until(lambda: pid_file.exists() or run.poll() is not None, timeout=120, message="the qcluster to start")
        assert run.poll() is None, "the inner test run ended before its qcluster was up"
        pids = json.loads(pid_file.read_text())
        assert len(pids) >= 3 and all(alive(pid) for pid in pids)  # the cluster's main process and its workers

        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=10)

        wait_until(
            lambda: not any(alive(pid) for pid in pids) and not group_members(pids[0]),
            timeout=30,
            message="the cluster and its workers to die with pytest",
        )
    finally:
        run.kill()
        if pids:  # only if the promise is broken: leave no process behind
            try:
                os.killpg(pids[0], signal.SIGKILL)
            except ProcessLookupError:
                pass

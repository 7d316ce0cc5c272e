"""Run only by test_killed_run_leaves_no_process.py (not collected on its own: no test_ prefix).

It starts a real qcluster the way the e2e tests do, writes the pids of the cluster's processes to
WEAVE_KILLED_RUN_PIDS once its workers are up, and then waits to be killed."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.processes import PROJECT_ROOT, ProcessGroups, wait_until


def test_start_a_qcluster_and_wait_to_be_killed(tmp_path):
    pid_file = os.environ.get("WEAVE_KILLED_RUN_PIDS")
    if not pid_file:
        pytest.skip("run by tests/tools/test_killed_run_leaves_no_process.py only")
    manage = [sys.executable, str(PROJECT_ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], check=True, capture_output=True)
    groups = ProcessGroups(tmp_path / "logs")
    cluster = groups.start("qcluster", [*manage, "qcluster"], env={"WEAVE_Q_WORKERS": "2"})
    wait_until(lambda: len(cluster.descendants()) >= 2, timeout=60, message="the cluster's workers")
    # Written whole, then renamed into place: the waiting test reads the file as soon as it exists.
    partial = Path(f"{pid_file}.partial")
    partial.write_text(json.dumps([cluster.pgid, *cluster.descendants()]))
    partial.replace(pid_file)
    time.sleep(600)

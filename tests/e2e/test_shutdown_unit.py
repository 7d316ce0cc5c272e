"""Shutdown as shipped: the systemd unit signals qcluster's main process only, and that lets a batch finish.

django-q2 hangs and cuts in-flight tasks off when its whole process group gets SIGTERM (systemd's
default KillMode=control-group). The unit in deploy/ uses KillMode=mixed; `make run` stops the main
pid first. The e2e test here sends SIGTERM exactly as KillMode=mixed does: to the main pid only.
"""

import configparser
import os
import signal
from pathlib import Path

import pytest
from django.conf import settings

from notifications.models import Notification
from notifications.services import notification_create
from notifications.testing.fake_provider import FakePushProvider
from tools.processes import wait_until

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "weave-qcluster.service"


def test_unit__signals_the_main_process_only_and_waits_past_the_task_timeout():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read(UNIT)
    service = unit["Service"]
    assert service["KillMode"] == "mixed"
    assert service["KillSignal"] == "SIGTERM"
    assert "manage.py qcluster" in service["ExecStart"]
    assert int(service["TimeoutStopSec"]) > settings.Q_CLUSTER["timeout"]


def test_run_script__stops_qcluster_main_pid_before_the_groups():
    script = (ROOT / "scripts" / "run.sh").read_text()
    stop = script[script.index("stop_all() {") :]
    assert stop.index('kill -TERM "$qcluster_pid"') < stop.index('kill -TERM -- "-$pid"')


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_sigterm_to_the_main_pid__the_in_flight_batch_finishes_delivered(groups, worker_env):
    # A slow provider keeps the whole batch in flight at once (concurrency >= batch) when the signal comes.
    with FakePushProvider(latency_ms=2500) as push:
        env = {
            **worker_env,
            "WEAVE_PUSH_URL": push.push_url,
            "WEAVE_PUSH_LEASE_TTL": "60",
            "WEAVE_PUSH_CONCURRENCY": "4",
            "WEAVE_PUSH_BATCH_SIZE": "4",
            "WEAVE_PUSH_TIMEOUT": "10",
        }
        cluster = groups.manage("qcluster", "qcluster", env=env)
        for i in range(4):
            notification_create(device_token=f"device-{i}", title=f"Message {i}", body="")

        def all_in_flight() -> bool:
            assert cluster.alive(), cluster.log_tail()
            return push.stats()["in_flight"] >= 4

        wait_until(all_in_flight, timeout=90, message="the whole batch to be in flight at the provider")
        os.kill(cluster.popen.pid, signal.SIGTERM)  # what KillMode=mixed does: the main pid only
        cluster.popen.wait(timeout=120)
        wait_until(lambda: not cluster.descendants(), timeout=30, message="the cluster's workers to exit")

    rows = list(Notification.objects.values_list("status", "owner", "attempts"))
    assert rows == [("delivered", None, 1)] * 4, rows

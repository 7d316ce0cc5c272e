"""A real qcluster's worker sessions carry the WORKER_DB_* limits; the test's own (web-like) session does not."""

import pytest
from django_q.models import Task
from django_q.tasks import async_task

from tools.processes import wait_until
from weave.worker_db import session_limits

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_qcluster_worker_sessions_run_with_the_limits(groups, worker_env):
    env = {**worker_env, "WEAVE_WORKER_DB_STATEMENT_TIMEOUT": "7", "WEAVE_WORKER_DB_KEEPALIVES_IDLE": "3"}
    cluster = groups.manage("qcluster", "qcluster", env=env)
    # save=True: the documented Q_CLUSTER stores no successes (save_limit -1) unless a task asks.
    task_id = async_task("weave.worker_db.session_limits", save=True)

    def done() -> bool:
        assert cluster.alive(), cluster.log_tail()
        return Task.objects.filter(id=task_id).exists()

    wait_until(done, timeout=90, message="the session_limits task to run")
    task = Task.objects.get(id=task_id)
    assert task.success, task.result
    limits = task.result
    assert limits["worker_mode"] is True
    assert limits["server"]["statement_timeout"] == "7s"
    assert limits["server"]["idle_in_transaction_session_timeout"] == "10s"
    assert limits["server"]["tcp_keepalives_idle"] == "3"
    assert limits["client"]["keepalives"] == "1" and limits["client"]["keepalives_idle"] == "3"
    # The enqueuing process is not a worker: its session keeps the site's settings.
    assert session_limits()["server"]["statement_timeout"] == "0"

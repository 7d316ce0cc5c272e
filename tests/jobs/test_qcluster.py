"""The same qcluster workers run a site's own job types and its `@task` functions: no new process type."""

import pytest

from tests.e2e.conftest import database_url
from tests.jobs.shipping.background import add
from tests.jobs.shipping.models import Booking, Shipment
from tools.processes import ProcessGroups, wait_until
from weave.tasks.compat import TaskResultStatus

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_task_and_a_job_run_on_a_real_qcluster(tmp_path):
    with ProcessGroups(log_dir=tmp_path / "logs") as groups:
        cluster = groups.manage("qcluster", "qcluster", env={"DATABASE_URL": database_url(), "WEAVE_Q_WORKERS": "2"})
        wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="qcluster to start")
        result = add.enqueue(20, 22)  # autocommit: the drain is asked for at once
        shipment = Shipment.objects.create(parcel="books")  # the due-time watcher asks for its attempt

        def finished() -> bool:
            assert cluster.alive(), cluster.log_tail()
            result.refresh()
            return result.is_finished and Shipment.objects.get(pk=shipment.pk).state == "done"

        wait_until(finished, timeout=60, message="the task and the job to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    assert Booking.objects.get(shipment=shipment).written_by.startswith("shipment:")

"""`@task` functions enqueued through `weave.tasks.WeaveBackend` finish on a real qcluster, on SQLite too.

The Django and Python matrix (noxfile.py) runs this test on every supported combination: on Django 6
through Django's own tasks framework, on 5.2 through the backport.
"""

import django
import pytest

from tests.jobs.shipping.background import add, explode
from tools.processes import wait_until
from weave.tasks.compat import TaskResultStatus

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_tasks_enqueued_through_weave__finish_on_a_real_qcluster(groups, worker_env):
    cluster = groups.manage("qcluster", "qcluster", env=worker_env)
    ok = add.enqueue(20, 22)  # autocommit: each enqueue asks for a drain at once
    failing = explode.enqueue()

    def finished() -> bool:
        assert cluster.alive(), cluster.log_tail()
        ok.refresh()
        failing.refresh()
        return ok.is_finished and failing.is_finished

    wait_until(finished, timeout=90, message="both tasks to finish")
    # The framework in use follows Django's version: Django's own on 6, the backport on 5.2.
    framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    assert type(ok).__module__.startswith(framework + "."), type(ok).__module__
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 42
    assert failing.status == TaskResultStatus.FAILED
    assert failing.errors and failing.errors[-1].exception_class is ValueError

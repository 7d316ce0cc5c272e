"""Two promises of the `django.tasks` backend: nothing is asked of the workers before the caller's
transaction commits, and a task whose worker's lease has lapsed reads as ready again, not running."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from django_q.models import OrmQ

from tests.jobs.shipping.background import add
from weave.leases import FakeClock
from weave.models import TaskRow
from weave.tasks.compat import TaskResultStatus

pytestmark = pytest.mark.django_db


def test_enqueue__the_drain_is_asked_for_only_once_the_callers_transaction_commits(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():
            result = add.enqueue(1, 2)
            assert OrmQ.objects.count() == 0  # a worker must not look for a row it cannot see yet
    assert OrmQ.objects.count() == 0 and callbacks, "no drain was left to run on commit"
    for callback in callbacks:
        callback()
    assert OrmQ.objects.count() == 1
    assert TaskRow.objects.get().result_id == result.id


def test_enqueue__a_rolled_back_transaction_leaves_no_task_and_no_drain(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            add.enqueue(1, 2)
            raise RuntimeError("the caller's own failure")
    assert TaskRow.objects.count() == 0 and OrmQ.objects.count() == 0


@pytest.mark.parametrize(("held_for", "status"), [(3600, TaskResultStatus.RUNNING), (-1, TaskResultStatus.READY)])
def test_get_result__a_task_is_running_only_while_its_workers_lease_is_live(held_for, status):
    result = add.enqueue(1, 2)
    row = TaskRow.objects.get(result_id=result.id)
    ttl = 30
    # A worker claimed it; its lease ends `held_for` seconds from now, by the database's own clock.
    claimed_at = timezone.now() + timedelta(seconds=held_for - ttl)
    TaskRow.objects.claim(row.pk, owner="w1", ttl=ttl, clock=FakeClock(claimed_at))
    assert add.get_result(result.id).status == status
    result.refresh()
    assert result.status == status

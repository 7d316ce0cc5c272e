"""`weave_explain task <id>`: the id Django gives (`TaskResult.id`) or the row's own number."""

from typing import Any

from weave.jobs.explain import explain_job
from weave.leases import Clock, default_clock
from weave.models import JobAttempt, TaskRow
from weave.tasks.results import JOB_TYPE
from weave.timeline import Timeline


def task_pk(key: Any) -> Any:
    """The row pk of the task named by `key`: a result id, or a row pk (`TaskRow.DoesNotExist` if neither).

    A row number whose row is gone but whose attempt records are left is still a task to explain."""
    text = str(key).strip()
    found = TaskRow.objects.filter(result_id=text).values_list("pk", flat=True).first()
    if found is None and text.isdigit():
        found = TaskRow.objects.filter(pk=int(text)).values_list("pk", flat=True).first()
        if found is None and JobAttempt.objects.filter(job_type=JOB_TYPE, job_id=str(int(text))).exists():
            found = int(text)
    if found is None:
        raise TaskRow.DoesNotExist(f"No task with result id or number {text!r}.")
    return found


def explain_task(key: Any, *, clock: Clock = default_clock) -> Timeline:
    """The timeline of one task, named by its result id or its row number."""
    pk = task_pk(key)
    timeline = explain_job(JOB_TYPE, TaskRow, pk, clock=clock)
    row = TaskRow.objects.only("result_id", "task_path", "queue_name").filter(pk=pk).first()
    if row is None:  # the row is gone: the story says so, told from its records
        return timeline
    timeline.title = (
        f"task {row.task_path} (result {row.result_id}, row {pk}, queue {row.queue_name}): "
        + (timeline.title.split(": ", 1)[-1])
    )
    return timeline

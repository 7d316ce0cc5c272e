"""The public API an app's own django-q2 tasks use: coalesced task requests and the watchers' hooks.

A job type registered with `weave.jobs` needs none of this: the core asks for its tasks, and gives a
type's own `pipeline` the `LingeringTask` it reports to (push delivery). An app that runs a task of
its own asks for it here, once per request name whatever the broker:

    request_task(request_name("myapp.drain"), "myapp.tasks.drain", group="myapp")

and the task says when it starts (`request_started`) and when due times changed (`tell_watchers`).
The `LingeringTask` the core gives a pipeline keeps the request slot taken while its task can take
more, hears new requests as they arrive (`on_arrival`), and pauses this process's watch of its kind
through a backlog. `settle_heap` and `is_cut_off` belong to the worker process.
"""

from weave.heap import settle as settle_heap
from weave.wake import (
    LingeringTask,
    ListenState,
    SlotClaimSQL,
    finish_claimed_request,
    listen_state,
    request_name,
    request_started,
    request_task,
    slot_claim_sql,
    tell_watchers,
)
from weave.worker_db import is_cut_off

__all__ = [
    "LingeringTask",
    "ListenState",
    "SlotClaimSQL",
    "finish_claimed_request",
    "is_cut_off",
    "listen_state",
    "request_name",
    "request_started",
    "request_task",
    "settle_heap",
    "slot_claim_sql",
    "tell_watchers",
]

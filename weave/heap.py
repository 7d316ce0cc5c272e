"""A worker process's long-lived heap, set aside from the garbage collector once the process has started.

A django-q2 worker imports Django, the site, the apps and their libraries before its first task: a few
hundred thousand objects that live as long as the process. CPython's full collection (generation 2)
walks every one of them while holding the GIL, so every thread of the process stops meanwhile: a push
drain's sends wait for it, and at low load such pauses set the tail of created -> delivered.

`settle()` collects once and then freezes what is left (`gc.freeze()`): those objects move to a
permanent generation that later collections skip. What tasks allocate afterwards is collected as
before. The cost is paid once, as the process starts, before it takes a task. The only objects never
collected afterwards are reference cycles among those frozen objects that become unreachable later,
which a process's imports and settings do not make.
"""

import gc
import logging
import time
from typing import Any

logger = logging.getLogger("weave.heap")


def settle(*, collect: bool = True) -> int:
    """Collect (unless `collect` is False), then freeze every object alive; return how many are frozen."""
    started = time.monotonic()
    if collect:
        gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.debug("event=heap_frozen objects=%d seconds=%.3f", frozen, time.monotonic() - started)
    return frozen


def settle_after_spawn(**_signal: Any) -> None:
    """A django-q2 `post_spawn` receiver: settle the worker's heap before its first task."""
    settle()

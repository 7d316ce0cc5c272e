"""The worker's heap set aside from the collector as it starts (`weave.heap`)."""

import gc
import weakref

import pytest

from weave import heap


class _Node:
    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process must not keep a frozen heap


def test_settle__collects_the_garbage_first_then_freezes_what_lives(unfrozen):
    cycle, kept = _Node(), _Node()
    cycle.other = cycle  # garbage only a collection frees (a reference cycle)
    gone = weakref.ref(cycle)
    del cycle

    frozen = heap.settle()

    assert gone() is None  # collected, not frozen for the life of the process
    assert frozen > 0 and gc.get_freeze_count() > 0  # (a frozen object freed since leaves the count)
    assert not any(obj is kept for obj in gc.get_objects())  # frozen objects are out of the collector's lists
    young = _Node()
    assert any(obj is young for obj in gc.get_objects())  # what comes later is collected as before


def test_settle__without_collecting_only_freezes(unfrozen):
    cycle = _Node()
    cycle.other = cycle
    kept = weakref.ref(cycle)
    del cycle

    heap.settle(collect=False)

    assert kept() is not None  # not collected: frozen as it was


def test_every_worker_process_settles_its_heap_as_it_starts():
    from django_q.signals import post_spawn

    assert heap.settle_after_spawn in [entry[1]() for entry in post_spawn.receivers]

"""Who is woken, and when, among the senders waiting on one HTTP/2 connection (`SendWaiters`), alone."""

import asyncio

import pytest

from notifications.backends.h2waiters import SendWaiters


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _run(scenario):
    return asyncio.run(scenario())


def test_a_freed_slot_wakes_one_sender_in_the_order_they_came():
    async def scenario():
        waiters, woken = SendWaiters(), []

        async def sender(name):
            await waiters.slot()
            woken.append(name)

        tasks = [asyncio.create_task(sender(n)) for n in "abc"]
        await _settle()
        waiters.slot_freed()
        await _settle()
        assert woken == ["a"]
        waiters.slot_freed()
        waiters.slot_freed()
        await _settle()
        assert woken == ["a", "b", "c"]
        await asyncio.gather(*tasks)

    _run(scenario)


def test_a_sender_woken_for_a_slot_and_then_cancelled_hands_the_slot_on():
    async def scenario():
        waiters, woken = SendWaiters(), []

        async def sender(name):
            await waiters.slot()
            woken.append(name)

        first, second = asyncio.create_task(sender("a")), asyncio.create_task(sender("b"))
        await _settle()
        waiters.slot_freed()  # wakes "a" ...
        first.cancel()  # ... whose deadline ends it before it runs
        await _settle()
        assert woken == ["b"]
        with pytest.raises(asyncio.CancelledError):
            await first
        await second

    _run(scenario)


def test_room_in_the_connection_window_goes_to_the_first_in_line_and_skips_those_who_gave_up():
    async def scenario():
        waiters, woken = SendWaiters(), []

        async def sender(stream_id, **kwargs):
            await waiters.window(stream_id, connection_shut=True, **kwargs)
            woken.append(stream_id)

        gave_up = asyncio.create_task(sender(1))
        rest = [asyncio.create_task(sender(i)) for i in (3, 5)]
        await _settle()
        gave_up.cancel()
        await _settle()
        # A sender woken with too little room keeps the head of the line.
        head = asyncio.create_task(sender(7, first=True))
        await _settle()
        waiters.connection_window_opened()
        await _settle()
        assert woken == [7]
        waiters.connection_window_opened()
        await _settle()
        assert woken == [7, 3]
        waiters.wake_all()
        await asyncio.gather(head, *rest)
        assert woken == [7, 3, 5]

    _run(scenario)


def test_a_sender_woken_for_window_room_and_then_cancelled_hands_the_room_on():
    async def scenario():
        waiters, woken = SendWaiters(), []

        async def sender(stream_id):
            await waiters.window(stream_id, connection_shut=True)
            woken.append(stream_id)

        first, second = asyncio.create_task(sender(1)), asyncio.create_task(sender(3))
        await _settle()
        waiters.connection_window_opened()
        first.cancel()
        await _settle()
        assert woken == [3]
        with pytest.raises(asyncio.CancelledError):
            await first
        await second

    _run(scenario)


def test_a_streams_own_window_and_its_end_wake_that_stream_alone():
    async def scenario():
        waiters, woken = SendWaiters(), []

        async def sender(stream_id, shut):
            await waiters.window(stream_id, connection_shut=shut)
            woken.append(stream_id)

        tasks = [asyncio.create_task(sender(1, False)), asyncio.create_task(sender(3, False))]
        tasks.append(asyncio.create_task(sender(5, True)))
        await _settle()
        waiters.stream_window_opened(3)
        await _settle()
        assert woken == [3]
        waiters.stream_window_opened(9)  # not waiting: nothing happens
        waiters.stream_gone(5)  # ended while it waited for the connection window
        await _settle()
        assert woken == [3, 5]
        waiters.connection_window_opened()  # stream 1 waits for its own window, not this one
        await _settle()
        assert woken == [3, 5]
        waiters.wake_all()
        await asyncio.gather(*tasks)
        assert woken == [3, 5, 1]

    _run(scenario)

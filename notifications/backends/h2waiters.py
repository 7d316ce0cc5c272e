"""The senders waiting on one HTTP/2 connection, each woken on its own when what it waits for may be there.

A sender waits for a stream slot (the peer's SETTINGS_MAX_CONCURRENT_STREAMS) or for room in a
flow-control window: the connection's, shared by every stream, or its own stream's. One event shared
by all of them woke every waiting sender at every change (each answer, each WINDOW_UPDATE), and all
but one went back to sleep: once bodies outgrew the peer's 64 KiB connection window, the looks at it
grew as the square of the senders waiting (100 bodies of 3 KB: about nine looks a body, now three).

Here a slot that frees wakes one sender, in the order they came, and a connection window that opens
wakes the first sender waiting for it. That sender, once it has sent what it could, hands the turn
to the next (`connection_window_opened()` again) while room is left, so the window is passed down
the line, not fought over. A sender woken and then cancelled (its deadline) hands its turn on, so no
free slot or room is left unused while another sender sleeps. A stream's own window and its end wake
that stream's sender alone; the connection's end, or new settings from the peer, wake everyone.
"""

import asyncio
from collections import OrderedDict, deque


class SendWaiters:
    """Who waits on one connection, and for what. Used on the connection's event loop only."""

    def __init__(self) -> None:
        self._slots: deque[asyncio.Future[None]] = deque()
        # Stream id -> its sender, blocked by the connection window (oldest first) or by its own.
        self._connection_window: OrderedDict[int, asyncio.Future[None]] = OrderedDict()
        self._stream_window: dict[int, asyncio.Future[None]] = {}

    # --- waiting ---------------------------------------------------------------------------------------

    async def slot(self) -> None:
        """Wait until a stream of this connection ends, or until the connection or its settings change."""
        waiter = asyncio.get_running_loop().create_future()
        self._slots.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.slot_freed()  # woken, then given up: the slot goes to the next in line
            raise

    async def window(self, stream_id: int, *, connection_shut: bool, first: bool = False) -> None:
        """Wait until stream `stream_id` may send DATA again: room in the window that was shut
        (`connection_shut`: the connection's; otherwise the stream's own), or the stream or connection ended.

        `first`: at the head of the line for the connection window (a sender that was woken and found
        too little room keeps its place, and the turn stays with it until the window grows)."""
        waiter = asyncio.get_running_loop().create_future()
        blocked = self._connection_window if connection_shut else self._stream_window
        blocked[stream_id] = waiter
        if first and connection_shut:
            self._connection_window.move_to_end(stream_id, last=False)
        try:
            await waiter
        except asyncio.CancelledError:
            if blocked.get(stream_id) is waiter:
                del blocked[stream_id]
            if waiter.done() and not waiter.cancelled() and connection_shut:
                self.connection_window_opened()  # woken, then given up: the room goes to the next in line
            raise

    @property
    def waiting_for_slot(self) -> int:
        """Senders in line for a stream slot here (a woken one may still be counted until it runs)."""
        return len(self._slots)

    # --- waking ----------------------------------------------------------------------------------------

    def waiting_for_window(self, stream_id: int) -> bool:
        """Whether a sender waits for the window a WINDOW_UPDATE on `stream_id` (0: the connection's) opens."""
        if not stream_id:
            return bool(self._connection_window)
        return stream_id in self._stream_window or stream_id in self._connection_window

    def slot_freed(self) -> None:
        """One stream ended (or a woken sender did not use its slot): wake the next sender waiting for one."""
        slots = self._slots
        while slots:
            waiter = slots.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def connection_window_opened(self) -> None:
        """The connection window has room: wake the first sender blocked by it (it hands the turn on)."""
        blocked = self._connection_window
        while blocked:
            _, waiter = blocked.popitem(last=False)
            if not waiter.done():
                waiter.set_result(None)
                return

    def stream_window_opened(self, stream_id: int) -> None:
        """The stream's own window has room: wake its sender, if it waits for it."""
        _wake(self._stream_window.pop(stream_id, None))

    def stream_gone(self, stream_id: int) -> None:
        """The stream ended, was reset or given up: its sender stops waiting, whatever it waited for."""
        _wake(self._stream_window.pop(stream_id, None))
        _wake(self._connection_window.pop(stream_id, None))

    def wake_all(self) -> None:
        """The connection ended or takes no new streams, or the peer's settings changed: every sender
        looks again."""
        slots, self._slots = self._slots, deque()
        waiters = [*slots, *self._connection_window.values(), *self._stream_window.values()]
        self._connection_window.clear()
        self._stream_window.clear()
        for waiter in waiters:
            _wake(waiter)


def _wake(waiter: "asyncio.Future[None] | None") -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)

"""Where the sender's and the completer's threads leave what they did for the worker's thread."""

import threading
from typing import Any


class Inbox:
    """A list of (kind, item) guarded by one condition: posters never wait, the taker sleeps until one arrives.

    The wait checks for items under the same lock the posters take, so a post made while the taker
    was busy is never missed (the taker does not sleep on an item that is already there).
    """

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._items: list[tuple[str, Any]] = []

    def post(self, kind: str, item: Any) -> None:
        with self._ready:
            self._items.append((kind, item))
            self._ready.notify_all()

    def post_all(self, kind: str, items: list[Any]) -> None:
        """Post each of `items` as (kind, item), with one wake-up for all of them."""
        with self._ready:
            self._items.extend((kind, item) for item in items)
            self._ready.notify_all()

    def take(self, timeout: float) -> list[tuple[str, Any]]:
        """Everything posted so far; wait up to `timeout` seconds for the first item when there is none."""
        with self._ready:
            if not self._items and timeout > 0:
                self._ready.wait_for(lambda: bool(self._items), timeout)
            items, self._items = self._items, []
        return items

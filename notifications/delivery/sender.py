"""The sender: an asyncio event loop on a thread of its own, many requests in flight, no database.

The worker's thread hands it rows (`submit()`), and each answer is posted to the worker's `Inbox`
the moment it is classified. The loop never waits on the database: while the worker claims,
renews or finishes, the sends already out keep going and their answers queue up in the inbox.
Backends are built on the worker's thread but open their connections on this loop, where they
send, and are closed on it too (`close()`).
"""

import asyncio
import threading
from collections.abc import Callable, Hashable, Mapping

from notifications.backends import Outcome, PushBackend, PushMessage, SendResult
from notifications.delivery.inbox import Inbox
from notifications.delivery.policy import safe_result
from weave.edge import outside_text

# A backend gets its own timeout to classify a slow peer; past that plus this grace the worker gives
# up on it (a buggy backend that ignores its deadline must not hold a slot, or the lease, forever).
GRACE_SECONDS = 1.0
ANSWER = "answer"


class AsyncSender:
    """Sends on a private event loop in its own thread; each answer goes to `inbox` as ("answer", (key, result))."""

    def __init__(
        self, backends: Mapping[str, PushBackend], *, missing: Callable[[str], SendResult], inbox: Inbox | None = None
    ) -> None:
        self._backends = dict(backends)
        self._missing = missing
        self.inbox = inbox or Inbox()
        self._count_lock = threading.Lock()
        self._in_flight = 0
        self._loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._answered: list[tuple[Hashable, SendResult]] = []  # answers of this turn, posted on the next
        name = f"{threading.current_thread().name}-sender"
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        """Messages submitted whose answer is not in the inbox yet."""
        return self._in_flight

    def submit(self, items: list[tuple[Hashable, PushMessage]]) -> None:
        """Start sending every (key, message) of `items` on the loop's thread."""
        if not items:
            return
        with self._count_lock:
            self._in_flight += len(items)
        self._loop.call_soon_threadsafe(self._start, items)

    def collect(self, timeout: float) -> list[tuple[Hashable, SendResult]]:
        """Wait up to `timeout` seconds for an answer; return every answer in (for callers without an inbox loop)."""
        return [item for kind, item in self.inbox.take(timeout if self._in_flight else 0.0) if kind == ANSWER]

    def close(self) -> None:
        """Cancel what is still in flight, close every backend's connections, stop the loop and its thread."""
        if self._loop.is_closed():
            return
        try:
            if self._thread.is_alive():
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            if not self._thread.is_alive():
                self._loop.close()

    def _start(self, items: list[tuple[Hashable, PushMessage]]) -> None:
        for key, message in items:
            task = self._loop.create_task(self._send(key, message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _answer(self, key: Hashable, result: SendResult) -> None:
        # Answers that arrive in one turn of the loop (one read from the connection often ends many
        # streams) go to the inbox together on the next turn: one wake-up of the worker's thread for
        # all of them, not one each.
        self._answered.append((key, result))
        if len(self._answered) == 1:
            self._loop.call_soon(self._post_answers)

    def _post_answers(self) -> None:
        answered, self._answered = self._answered, []
        if not answered:
            return
        # Posted before they stop counting as in flight: `collect()` never sees "none out, none in" while
        # answers are between the two, so it never returns without answers that are already here.
        self.inbox.post_all(ANSWER, answered)
        with self._count_lock:
            self._in_flight -= len(answered)

    async def _send(self, key: Hashable, message: PushMessage) -> None:
        backend = self._backends.get(message.backend)
        if backend is None:
            self._answer(key, self._missing(message.backend))
            return
        self._answer(key, safe_result(await _classified(backend, message), backend.secrets()))

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._post_answers()
        for backend in self._backends.values():
            try:
                await backend.aclose()
            except Exception:  # noqa: BLE001, S110 - closing is best effort; the sockets die with the loop
                pass


async def _classified(backend: PushBackend, message: PushMessage) -> SendResult:
    """`backend.send(message)`, or the answer that stands for it when the backend overran or broke its contract."""
    try:
        async with asyncio.timeout(backend.timeout + GRACE_SECONDS):
            result = await backend.send(message)
    except TimeoutError:
        return SendResult(
            outcome=Outcome.UNKNOWN,
            reason=(
                f"Backend {backend.alias!r} overran its {backend.timeout:g} s deadline; the request may have "
                "reached the provider. Retried with the same idempotency key."
            ),
        )
    except Exception as exc:  # noqa: BLE001 - a backend bug must end as an answer, never as a lost row
        detail = outside_text(f"{type(exc).__name__}: {exc}", secrets=backend.secrets())
        return SendResult(
            outcome=Outcome.UNKNOWN,
            reason=f"Backend {backend.alias!r} raised instead of answering ({detail}); the provider may have it.",
        )
    checked: object = result  # a third-party backend may break its contract
    if not isinstance(checked, SendResult):
        return SendResult(
            outcome=Outcome.UNKNOWN, reason=f"Backend {backend.alias!r} returned {type(checked).__name__}."
        )
    return result


def build_result_missing(alias: str) -> SendResult:
    """The answer for a row whose backend alias is not configured (any more)."""
    return SendResult(
        outcome=Outcome.TEMPORARY,
        reason=f"No push backend {alias!r} is configured in WEAVE PUSH_BACKENDS; nothing was sent.",
    )

"""The sending side of a worker: one event loop on its own thread, many requests in flight.

Django's ORM is synchronous and a worker keeps ONE database connection, so the worker's own thread
does every database statement and the sends happen elsewhere: this thread runs an asyncio loop that
owns the backends (and their pooled httpx.AsyncClient connections, HTTP/2 where a backend speaks it).
The worker hands over messages with `submit()` (one thread-safe call per group) and collects answers
with `collect()`; nothing on the loop touches the database.
"""

import asyncio
import queue
import threading
from collections.abc import Callable, Hashable, Mapping

from notifications.backends import Outcome, PushBackend, PushMessage, SendResult
from notifications.delivery.policy import safe_result
from weave.sanitize import outside_text

# A backend gets its own timeout to classify a slow peer; past that plus this grace the worker gives
# up on it (a buggy backend that ignores its deadline must not hold a slot, or the lease, forever).
GRACE_SECONDS = 1.0


class AsyncSender:
    """Runs sends on a private event loop thread; answers come back through a thread-safe queue."""

    def __init__(self, backends: Mapping[str, PushBackend], *, missing: Callable[[str], SendResult]) -> None:
        self._backends = dict(backends)
        self._missing = missing
        self._answers: queue.SimpleQueue[tuple[Hashable, SendResult]] = queue.SimpleQueue()
        self._loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._run, name="push-send", daemon=True)
        self._started = False

    # --- called from the worker's thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._started = True

    def submit(self, items: list[tuple[Hashable, PushMessage]]) -> None:
        """Start sending every (key, message) of `items`; each answer comes back under its key."""
        if items:
            self._loop.call_soon_threadsafe(self._start_all, items)

    def collect(self, timeout: float) -> list[tuple[Hashable, SendResult]]:
        """Wait up to `timeout` seconds for an answer, then return it with every other answer already in."""
        try:
            first = self._answers.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return []
        answers = [first]
        while True:
            try:
                answers.append(self._answers.get_nowait())
            except queue.Empty:
                return answers

    def close(self) -> None:
        """Cancel what is still in flight, close every backend's connections, stop the loop thread."""
        if not self._started:
            self._loop.close()
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            future.result(timeout=10)
        except (TimeoutError, asyncio.CancelledError, RuntimeError):
            pass  # a backend that will not close must not hang the worker
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    # --- on the loop thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _start_all(self, items: list[tuple[Hashable, PushMessage]]) -> None:
        for key, message in items:
            task = self._loop.create_task(self._send(key, message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, key: Hashable, message: PushMessage) -> None:
        backend = self._backends.get(message.backend)
        if backend is None:
            self._answers.put((key, self._missing(message.backend)))
            return
        try:
            async with asyncio.timeout(backend.timeout + GRACE_SECONDS):
                result = await backend.send(message)
        except TimeoutError:
            result = SendResult(
                outcome=Outcome.UNKNOWN,
                reason=(
                    f"Backend {backend.alias!r} overran its {backend.timeout:g} s deadline; the request may have "
                    "reached the provider. Retried with the same idempotency key."
                ),
            )
        except Exception as exc:  # noqa: BLE001 - a backend bug must end as an answer, never as a lost row
            detail = outside_text(f"{type(exc).__name__}: {exc}", secrets=backend.secrets())
            result = SendResult(
                outcome=Outcome.UNKNOWN,
                reason=f"Backend {backend.alias!r} raised instead of answering ({detail}); the provider may have it.",
            )
        else:
            if not isinstance(result, SendResult):
                result = SendResult(
                    outcome=Outcome.UNKNOWN, reason=f"Backend {backend.alias!r} returned {type(result).__name__}."
                )
        self._answers.put((key, safe_result(result, backend.secrets())))

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for backend in self._backends.values():
            try:
                await backend.aclose()
            except Exception:  # noqa: BLE001, S110 - closing is best effort; the sockets die with the loop
                pass


def build_result_missing(alias: str) -> SendResult:
    """The answer for a row whose backend alias is not configured (any more)."""
    return SendResult(
        outcome=Outcome.TEMPORARY,
        reason=f"No push backend {alias!r} is configured in WEAVE PUSH_BACKENDS; nothing was sent.",
    )

"""The sending side of a worker: an asyncio loop stepped by the worker's own thread, many requests in flight.

Django's ORM is synchronous and a worker keeps ONE database connection, so every database statement
runs on the worker's thread with no event loop running (Django refuses ORM calls inside a running
loop). The sends live on an asyncio loop that the same thread runs only between its statements:
`submit()` creates the send tasks, `collect()` runs the loop until at least one answer is in (or a
timeout passes) and returns every answer in. While the thread writes to the database the loop is
paused; the kernel keeps buffering the peers' answers, and the next `collect()` takes them all.

Why not a sending thread: two threads hand the GIL back and forth on every socket call and every
statement (up to the 5 ms switch interval each time); in the profile that cost more than the sends.
One thread, one loop, no locks: the worker's CPU goes to the work.
"""

import asyncio
from collections.abc import Callable, Hashable, Mapping

from notifications.backends import Outcome, PushBackend, PushMessage, SendResult
from notifications.delivery.policy import safe_result
from weave.sanitize import outside_text

# A backend gets its own timeout to classify a slow peer; past that plus this grace the worker gives
# up on it (a buggy backend that ignores its deadline must not hold a slot, or the lease, forever).
GRACE_SECONDS = 1.0


class AsyncSender:
    """Sends on a private event loop that the caller's thread steps; answers come back from `collect()`."""

    def __init__(self, backends: Mapping[str, PushBackend], *, missing: Callable[[str], SendResult]) -> None:
        self._backends = dict(backends)
        self._missing = missing
        self._answers: list[tuple[Hashable, SendResult]] = []
        self._loop = asyncio.new_event_loop()
        self._arrived = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, items: list[tuple[Hashable, PushMessage]]) -> None:
        """Start sending every (key, message) of `items` (they go out on the next `collect()`)."""
        for key, message in items:
            task = self._loop.create_task(self._send(key, message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def collect(self, timeout: float) -> list[tuple[Hashable, SendResult]]:
        """Run the loop until an answer is in or `timeout` seconds pass; return every answer in."""
        if not self._answers and self._tasks:
            self._loop.run_until_complete(self._wait(max(0.0, timeout)))
        answers, self._answers = self._answers, []
        return answers

    def close(self) -> None:
        """Cancel what is still in flight, close every backend's connections, close the loop."""
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self._shutdown())
        finally:
            self._loop.close()

    async def _wait(self, timeout: float) -> None:
        self._arrived.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._arrived.wait()
        except TimeoutError:
            return

    def _answer(self, key: Hashable, result: SendResult) -> None:
        self._answers.append((key, result))
        self._arrived.set()

    async def _send(self, key: Hashable, message: PushMessage) -> None:
        backend = self._backends.get(message.backend)
        if backend is None:
            self._answer(key, self._missing(message.backend))
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
        checked: object = result  # a third-party backend may break its contract
        if not isinstance(checked, SendResult):
            result = SendResult(
                outcome=Outcome.UNKNOWN, reason=f"Backend {backend.alias!r} returned {type(checked).__name__}."
            )
        self._answer(key, safe_result(result, backend.secrets()))

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

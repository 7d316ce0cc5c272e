"""Run test workers on real threads, each with its own database connection, as separate hosts would."""

import threading
from collections.abc import Callable, Iterable

from django.db import connections


def run_threads(target: Callable[[str], None], names: Iterable[str]) -> None:
    """Run `target(name)` on one thread per name, started together; re-raise the first error any raised."""
    names = list(names)
    start = threading.Barrier(len(names))
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            start.wait()
            target(name)
        except BaseException as exc:  # re-raised on the test's thread below
            errors.append(exc)
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=run, args=(name,), name=f"test-{name}") for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]

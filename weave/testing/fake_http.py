"""What the fake HTTP servers (push provider, supplier services) share: serving, stopping, settings.

Each fake is a real `ThreadingHTTPServer` on loopback, so clients go through real sockets, real
timeouts and real connection drops. Tests run one on a daemon thread (port 0 picks a free port);
a management command runs one in the foreground for the demo, the chaos run and the benchmarks.
"""

import threading
from collections.abc import Callable
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Self, TypeVar

from weave.wording import plural

__all__ = [
    "FakeHTTPServer",
    "FakeHandler",
    "FakeService",
    "update_settings",
]


class FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a hanging handler must not keep the process alive
    block_on_close = False
    allow_reuse_address = True
    # socketserver's default backlog of 5 resets bursts of new connections from a busy worker pool.
    request_queue_size = 256


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real service
    # Small keep-alive answers would otherwise wait ~40 ms on the client's delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # one line per request would drown test and demo output


_Server = TypeVar("_Server", bound=ThreadingHTTPServer)


class FakeService(Generic[_Server]):
    """Runs a `FakeHTTPServer` in the foreground or on a daemon thread; subclasses hold the state."""

    thread_name = "fake-http"

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        assert isinstance(host, str)  # an AF_INET server's address; bytes only for AF_UNIX
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        """Serve on a daemon thread and return at once."""
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def serve_until_interrupted(self, banner: str, write: Callable[[str], object]) -> None:
        """Serve in the foreground until Ctrl-C or SIGTERM's KeyboardInterrupt; announce `banner` first."""
        write(banner)
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def before_stop(self) -> None:
        """Wake handlers that are waiting on purpose (hangs, holds) so shutdown does not wait for them."""

    def stop(self) -> None:
        self.before_stop()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def update_settings(config: Any, changes: dict[str, Any]) -> None:
    """Apply `changes` to a settings dataclass, refusing names it does not have."""
    known = {f.name for f in fields(config)}
    unknown = set(changes) - known
    if unknown:
        raise ValueError(f"unknown {plural(len(unknown), 'setting{}')}: {', '.join(sorted(unknown))}")
    for name, value in changes.items():
        setattr(config, name, value)

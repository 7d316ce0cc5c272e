"""A silent TCP proxy: forwards bytes until told to go quiet, like a dropped link, then heals.

    with SilentProxy(("127.0.0.1", 5432)) as proxy:      # listens on 127.0.0.1:<free port>
        ... connect the worker to proxy.port ...
        proxy.partition(max_seconds=30)                  # nothing moves either way; nothing is closed
        ...
        proxy.heal()                                     # held bytes flow again, closes pass through

        proxy.lose_replies(max_seconds=30)               # the client's bytes still reach the server ...
        proxy.cut_clients()                              # ... its replies never come back; the link drops

While partitioned, the proxy neither reads nor forwards in either direction and closes nothing: each
end sees a peer that has stopped answering, and neither sees a FIN or a reset. A close that happens
during the partition (the server ending a session that sat idle in a transaction) is passed on only
after healing, the way a real link delivers it once it is back. Bytes a peer sent meanwhile stay in
the kernel's buffers and are delivered on healing, as TCP retransmission would.

One limit, by nature of a userspace proxy: the kernel still acknowledges what a peer sends to the
proxy, so TCP keepalives and `tcp_user_timeout` do not fire across this proxy as they would across a
dead link. The server's `idle_in_transaction_session_timeout` and `statement_timeout` do; that is
what frees a cut-off worker's locks (docs/operations/partitions.md).

A one-way loss is the case a two-way partition cannot show: a worker's COMMIT reaches the server
and commits, and the link fails before the reply comes back, so the worker cannot know whether its
write landed. While replies are lost the proxy forwards client-to-server bytes and reads nothing from
the server; `cut_clients()` then closes every link (the client sees a reset, the server a close), and
the replies held meanwhile are never delivered. New connections after the cut pass normally, so the
worker can read back on a fresh connection what landed.

Loopback only, and bounded in time: a partition heals itself after `max_seconds`, lost replies end
in a cut by themselves after theirs (so a worker waiting on a reply never waits past it), every wait
is bounded, and `close()` (or leaving the `with` block) stops every thread and closes every socket.
"""

import ipaddress
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_CHUNK = 65536
_TICK = 0.05  # seconds between checks of the partition flag and the stop flag


def _loopback(host: str) -> None:
    try:
        address = ipaddress.ip_address(socket.gethostbyname(host))
    except (OSError, ValueError) as error:
        raise ValueError(f"SilentProxy is loopback-only; cannot resolve {host!r}") from error
    if not address.is_loopback:
        raise ValueError(f"SilentProxy is loopback-only; {host!r} is {address}, not a loopback address")


@dataclass
class _Link:
    """One client connection and its upstream connection."""

    client: socket.socket
    upstream: socket.socket
    closed: bool = False


class SilentProxy:
    """A loopback TCP proxy to `target` that can go silent in both directions on command."""

    def __init__(self, target: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0) -> None:
        _loopback(host)
        _loopback(target[0])
        self.target = target
        self._listener = socket.create_server((host, port))
        self._listener.settimeout(_TICK)
        self.host, self.port = self._listener.getsockname()[:2]
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._quiet = threading.Event()  # set while partitioned
        self._heal_at = 0.0
        self._losing = threading.Event()  # set while server-to-client bytes are held (a one-way loss)
        self._cut_at = 0.0
        self.partitions = 0  # how many times partition() was called
        self.resets = 0  # how many times reset() was called
        self.cuts = 0  # how many times cut_clients() ran (called, or at the end of lost replies)
        self._refuse_until = 0.0
        self._threads: list[threading.Thread] = []
        self._start(self._accept, "proxy-accept")
        self._start(self._auto_heal, "proxy-auto-heal")

    # --- control -------------------------------------------------------------------------------------

    @property
    def partitioned(self) -> bool:
        return self._quiet.is_set()

    def partition(self, *, max_seconds: float = 60.0) -> None:
        """Stop forwarding in both directions, closing nothing; heal by itself after `max_seconds`."""
        self._heal_at = time.monotonic() + max_seconds
        self.partitions += 1
        self._quiet.set()

    def heal(self) -> None:
        """Forward again: bytes held during the partition flow, and closes seen meanwhile pass on."""
        self._quiet.clear()

    @property
    def losing_replies(self) -> bool:
        return self._losing.is_set()

    def lose_replies(self, *, max_seconds: float = 60.0) -> None:
        """Hold every server-to-client byte from now on while still forwarding client-to-server bytes.

        A COMMIT sent now reaches the server and commits, and its reply never arrives: the case where a
        worker cannot know whether its write landed. Ends in `cut_clients()`, by itself after `max_seconds`.
        """
        self._cut_at = time.monotonic() + max_seconds
        self._losing.set()

    def cut_clients(self) -> None:
        """Drop every link now: the client gets a reset, the server a close, the held replies are lost.

        Connections made after this pass normally (replies are no longer lost), so a worker can read
        back on a fresh connection what landed.
        """
        with self._lock:
            self.cuts += 1
            self._losing.clear()
            for link in self._links:
                self._close_link(link, reset=True)
            self._links = []

    def reset(self, *, refuse_for: float = 0.0) -> None:
        """Close every link now and refuse new connections for `refuse_for` seconds: to the client, the
        way a PostgreSQL restart looks (sessions end, reconnects fail until the server is back)."""
        self._refuse_until = time.monotonic() + refuse_for
        self.resets += 1
        with self._lock:
            for link in self._links:
                self._close_link(link)
            self._links = []

    @contextmanager
    def partitioned_for(self, max_seconds: float = 60.0) -> Iterator["SilentProxy"]:
        """Partition for the duration of the `with` block (at most `max_seconds`)."""
        self.partition(max_seconds=max_seconds)
        try:
            yield self
        finally:
            self.heal()

    def url(self, database_url: str) -> str:
        """Return `database_url` (postgres://user@host:port/name) pointed at this proxy instead."""
        scheme, rest = database_url.split("://", 1)
        credentials, _, tail = rest.rpartition("@")
        path = tail[tail.index("/") :] if "/" in tail else ""
        at = f"{credentials}@" if credentials else ""
        return f"{scheme}://{at}{self.host}:{self.port}{path}"

    def close(self) -> None:
        """Stop every thread and close every socket (idempotent)."""
        self._stop.set()
        self._quiet.clear()
        self._losing.clear()
        for thread in self._threads:
            thread.join(5)
        self._listener.close()
        with self._lock:
            for link in self._links:
                self._close_link(link)

    def __enter__(self) -> "SilentProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the threads ----------------------------------------------------------------------------------

    def _start(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _auto_heal(self) -> None:
        while not self._stop.wait(_TICK):
            if self._quiet.is_set() and time.monotonic() >= self._heal_at:
                self._quiet.clear()
            if self._losing.is_set() and time.monotonic() >= self._cut_at:
                self.cut_clients()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if time.monotonic() < self._refuse_until:  # "restarting": the client's connect fails
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            link = _Link(client, upstream)
            with self._lock:
                self._links.append(link)
            self._start(self._pump, f"proxy-link-{client.fileno()}", link)

    def _pump(self, link: _Link) -> None:
        pairs = {link.client: link.upstream, link.upstream: link.client}
        with selectors.DefaultSelector() as both, selectors.DefaultSelector() as client_only:
            for sock in pairs:
                sock.setblocking(True)
                both.register(sock, selectors.EVENT_READ)
            client_only.register(link.client, selectors.EVENT_READ)
            while not self._stop.is_set() and not link.closed:
                if self._quiet.is_set():
                    # A dropped link: read nothing, send nothing, close nothing.
                    self._stop.wait(_TICK)
                    continue
                # Losing replies: the server's bytes stay unread (held until the cut drops them).
                selector = client_only if self._losing.is_set() else both
                # The server's side first: on healing, a session the server ended meanwhile delivers its
                # last words (e.g. FATAL: idle-in-transaction timeout) before the client's held bytes.
                ready = sorted(selector.select(_TICK), key=lambda event: event[0].fileobj is link.client)
                for key, _ in ready:
                    if self._quiet.is_set():
                        break
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    if source is link.upstream and self._losing.is_set():
                        continue
                    try:
                        data = source.recv(_CHUNK)
                    except OSError:
                        data = b""
                    if not data:
                        with self._lock:
                            self._close_link(link)
                        return
                    try:
                        pairs[source].sendall(data)
                    except OSError:
                        with self._lock:
                            self._close_link(link)
                        return

    @staticmethod
    def _close_link(link: _Link, *, reset: bool = False) -> None:
        if link.closed:
            return
        link.closed = True
        if reset:
            # SO_LINGER with a zero timeout: close() sends a reset, as a link torn down mid-reply does.
            try:
                link.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        for sock in (link.client, link.upstream):
            try:
                sock.close()
            except OSError:
                pass

"""The silent TCP proxy: forwards, goes quiet both ways without closing, heals, and stays on loopback."""

import socket
import threading
import time

import pytest

from tools.partition import SilentProxy

QUIET = 0.3  # how long "nothing arrives" is watched for; a bound, not a timing claim


class EchoServer:
    """Echoes what it reads; `hang_up()` closes every accepted connection from the server side."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        try:
            while data := conn.recv(1024):
                conn.sendall(data)
        except OSError:
            pass

    def hang_up(self) -> None:
        for conn in self.accepted:
            conn.sendall(b"bye")
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


def _client(proxy: SilentProxy) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=5)
    return sock


def test_proxy__forwards_then_goes_silent_without_closing_then_heals(echo):
    with SilentProxy(("127.0.0.1", echo.port)) as proxy, _client(proxy) as sock:
        sock.sendall(b"one")
        assert sock.recv(16) == b"one"
        proxy.partition(max_seconds=30)
        sock.sendall(b"two")  # accepted by the kernel, like a write onto a dropped link
        sock.settimeout(QUIET)
        with pytest.raises(TimeoutError):
            sock.recv(16)  # no reply, and no FIN either (that would read b"")
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(16) == b"two"  # held bytes flow once the link is back


def test_proxy__a_close_during_the_partition_arrives_only_after_healing(echo):
    with SilentProxy(("127.0.0.1", echo.port)) as proxy, _client(proxy) as sock:
        sock.sendall(b"hi")
        assert sock.recv(16) == b"hi"
        proxy.partition(max_seconds=30)
        echo.hang_up()  # e.g. the server ending a session idle in a transaction
        sock.settimeout(QUIET)
        with pytest.raises(TimeoutError):
            sock.recv(16)
        proxy.heal()
        sock.settimeout(5)
        received = b""
        while chunk := sock.recv(16):
            received += chunk
        assert received == b"bye"  # the server's last words, then the close


def test_proxy__partition_heals_itself_after_its_bound(echo):
    with SilentProxy(("127.0.0.1", echo.port)) as proxy, _client(proxy) as sock:
        proxy.partition(max_seconds=0.2)
        sock.sendall(b"late")
        sock.settimeout(10)
        assert sock.recv(16) == b"late"
        assert not proxy.partitioned


def test_proxy__loopback_only():
    with pytest.raises(ValueError, match="loopback-only"):
        SilentProxy(("192.0.2.10", 5432))
    with pytest.raises(ValueError, match="loopback-only"):
        SilentProxy(("127.0.0.1", 5432), host="0.0.0.0")  # noqa: S104 (the refusal is the point)


def test_proxy__url_points_a_database_url_at_the_proxy(echo):
    with SilentProxy(("127.0.0.1", echo.port)) as proxy:
        assert (
            proxy.url("postgres://postgres@127.0.0.1:5432/weave") == f"postgres://postgres@127.0.0.1:{proxy.port}/weave"
        )


class Recorder:
    """Keeps what it reads and answers "ok"; `got` fills as bytes arrive (the server's side of a lost reply)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.got = b""
        self.arrived = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(1024):
                self.got += data
                self.arrived.set()
                conn.sendall(b"ok")
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()


def test_proxy__lost_replies_let_the_request_through_then_the_cut_fails_the_waiting_client(echo):
    recorder = Recorder()
    try:
        with SilentProxy(("127.0.0.1", recorder.port)) as proxy, _client(proxy) as sock:
            sock.sendall(b"BEGIN")
            assert sock.recv(16) == b"ok"
            proxy.lose_replies(max_seconds=30)
            sock.sendall(b"COMMIT")
            # The request reaches the server (it commits) ...
            assert recorder.arrived.wait(5)
            deadline = time.monotonic() + 5
            while recorder.got != b"BEGINCOMMIT" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert recorder.got == b"BEGINCOMMIT"
            # ... and its reply does not come back.
            sock.settimeout(QUIET)
            with pytest.raises(TimeoutError):
                sock.recv(16)
            proxy.cut_clients()
            sock.settimeout(5)
            with pytest.raises(ConnectionResetError):
                sock.recv(16)  # the reply is lost for good: the connection fails, not a late "ok"
            assert (proxy.cuts, proxy.losing_replies) == (1, False)
            # A fresh connection after the cut gets its replies (to read back what landed).
            with _client(proxy) as fresh:
                fresh.sendall(b"SELECT")
                assert fresh.recv(16) == b"ok"
    finally:
        recorder.close()


def test_proxy__lost_replies_end_in_a_cut_by_themselves_after_their_bound(echo):
    with SilentProxy(("127.0.0.1", echo.port)) as proxy, _client(proxy) as sock:
        proxy.lose_replies(max_seconds=0.2)
        sock.sendall(b"late")
        sock.settimeout(10)
        with pytest.raises(ConnectionResetError):
            sock.recv(16)
        assert (proxy.cuts, proxy.losing_replies) == (1, False)

"""SilentProxy.reset: what a PostgreSQL restart looks like to a client (the chaos kit's db_restart fault)."""

import socket
import threading
import time

from tools.partition import SilentProxy


def echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(
                target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(100), b"")], daemon=True
            ).start()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_reset__ends_every_session_and_refuses_reconnects_until_the_server_is_back():
    server, port = echo_server()
    with SilentProxy(("127.0.0.1", port)) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        client.sendall(b"ping")
        assert client.recv(100) == b"ping"
        proxy.reset(refuse_for=1.0)
        assert client.recv(100) == b""  # the session ended, as when the server shuts down
        refused = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert refused.recv(100) == b""  # "restarting": the connection is closed at once
        time.sleep(1.2)
        back = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        back.sendall(b"again")
        assert back.recv(100) == b"again"
        for sock in (client, refused, back):
            sock.close()
    server.close()

"""The lean HTTP/1.1 transport over TLS: the quiet-connection check keeps a quiet connection (TLS 1.3
session tickets and all) and still drops one the peer spoke out of turn on."""

import asyncio
import json
import ssl
import uuid

import pytest

from notifications.backends.base import Outcome, PushMessage
from notifications.backends.credentials import tls_context
from notifications.backends.http import make_client
from notifications.backends.webhook import WebhookBackend


class TLSPeer:
    def __init__(self, keys, *, extra: bool) -> None:
        self.keys = keys
        self.extra = extra
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                fields = dict(line.split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:] if ": " in line)
                fields = {k.lower(): v for k, v in fields.items()}
                await reader.readexactly(int(fields.get("content-length", "0")))
                key = fields.get("idempotency-key", "")
                body = json.dumps({"id": key}).encode()
                # The key echoed in a header too: the proof that lets the client keep the connection.
                head = b"HTTP/1.1 200 OK\r\nIdempotency-Key: %s\r\n" % key.encode()
                answer = head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                writer.write(answer * (2 if self.extra else 1))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("extra", [False, True])
def test_tls_keep_alive__reused_when_quiet_closed_after_stray_bytes(keys, extra):
    peer = TLSPeer(keys, extra=extra)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(keys.server_cert), str(keys.server_key))
    messages = [PushMessage(idempotency_key=str(uuid.uuid4()), token="t", title="a", body="b") for _ in range(8)]

    async def scenario():
        server = await asyncio.start_server(peer.handle, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        options = {"url": f"https://127.0.0.1:{port}/push"}
        hook = WebhookBackend(alias="default", options=options, timeout=5, concurrency=1)
        hook._client = make_client(timeout=5, concurrency=1, verify=tls_context(str(keys.ca_file)))
        try:
            return [await hook.send(m) for m in messages]
        finally:
            await hook.aclose()
            server.close()

    results = asyncio.run(scenario())

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * len(messages)
    assert [r.provider_message_id for r in results] == [m.idempotency_key for m in messages]
    assert peer.connections == (len(messages) if extra else 1)

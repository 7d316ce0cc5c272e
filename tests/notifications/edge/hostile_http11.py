"""A hostile HTTP/1.1 push gateway for the edge tests, written here and independent of the project's fakes.

It runs an asyncio server on 127.0.0.1 in its own thread. Every request it reads is answered with
its own Idempotency-Key in the body (`{"id": <key>}`), so a test can tell whose answer a row stored:
410 for a `to` starting with `gone-`, 200 otherwise. What goes wrong is chosen per request by
`plan`, a list of actions consumed one per request (then `default`):

- "ok": one well-framed answer;
- "extra": the answer, then a second copy of it in the same write;
- "early": the answer right after the request head, then the body read as a new request and answered
  400 (`{"id": "garbage"}`);
- "short": the answer with a Content-Length shorter than its body (the tail stays on the wire);
- "long": a Content-Length longer than the body, then the connection closed;
- "split": the answer one byte per write;
- "drop": the connection closed without an answer;
- "hang": no answer for ten seconds, then a close;
- "huge": a 200 whose body is 1 MiB of filler after the JSON;
- "cookie": the answer with a `Set-Cookie` header;
- "late": the answer, then the same answer again `late_ms` (5 ms) later, as a gateway that writes its
  reply twice does: the copy comes after the client may already have sent its next request.

`echo=True` puts each request's Idempotency-Key in its own answer's `Idempotency-Key` header too
(copies included; never in the 400 to a body or an unsolicited 408), the echo a client may check to
prove an answer is its request's own.

`heads` keeps every request's headers (lower-cased names), so a test can see what the client sent.
- "408": the answer, then an unsolicited 408 and a close.

Stray bytes go out in the same write as the answer they follow: a client can see them before it
sends its next request, which is all HTTP/1.1 lets it see. `idle_408()` makes the peer write an
unsolicited 408 and close on every connection that is idle.
"""

import asyncio
import json
import threading
from typing import Any

GARBAGE = "garbage"


def answer(status: int, key: str, *, length: int | None = None, extra_headers: str = "", echo: bool = False) -> bytes:
    body = json.dumps({"id": key}).encode()
    size = len(body) if length is None else length
    reason = {200: "OK", 202: "Accepted", 400: "Bad Request", 408: "Request Timeout", 410: "Gone"}.get(status, "X")
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
    if echo:
        head += f"Idempotency-Key: {key}\r\n"
    head += f"Content-Length: {size}\r\n{extra_headers}\r\n"
    return head.encode() + body


class HostilePeer:
    def __init__(
        self, *, plan: list[str] | None = None, default: str = "ok", echo: bool = False, late_ms: float = 5
    ) -> None:
        self.plan = list(plan or [])
        self.default = default
        self.echo = echo
        self.late_ms = late_ms
        self.late_copies = 0  # copies written by "late" (the connection may be gone by then)
        self.lock = threading.Lock()
        self.received: list[str] = []  # idempotency keys, in arrival order
        self.heads: list[dict[str, str]] = []
        self.connections = 0
        self.writers: set[asyncio.StreamWriter] = set()
        self.idle: set[asyncio.StreamWriter] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.port = 0

    # --- the server -----------------------------------------------------------------------------------

    def _next(self) -> str:
        with self.lock:
            return self.plan.pop(0) if self.plan else self.default

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self.lock:
            self.connections += 1
        self.writers.add(writer)
        try:
            while True:
                self.idle.add(writer)
                head = await reader.readuntil(b"\r\n\r\n")
                self.idle.discard(writer)
                headers = _headers(head)
                self.heads.append(headers)
                key = headers.get("idempotency-key", "")
                length = int(headers.get("content-length", "0"))
                action = self._next()
                if action == "early":
                    await self._early(reader, writer, key, length)
                    continue
                body = json.loads(await reader.readexactly(length))
                with self.lock:
                    self.received.append(key)
                status = 410 if str(body.get("to", "")).startswith("gone-") else 200
                if not await self._answer(writer, action, status, key):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.writers.discard(writer)
            self.idle.discard(writer)
            writer.close()

    async def _early(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: str, length: int) -> None:
        """Answer from the head alone (for a small body, read in the same breath), then take the body
        for a new request and refuse it."""
        with self.lock:
            self.received.append(key)
        if length > 65536:
            # A body too big to have left the client yet: the answer goes out before it did.
            writer.write(answer(200, key, echo=self.echo))
            await writer.drain()
            await reader.readexactly(length)
            writer.write(answer(400, GARBAGE))
        else:
            body = json.loads(await reader.readexactly(length))
            status = 410 if str(body.get("to", "")).startswith("gone-") else 200
            writer.write(answer(status, key, echo=self.echo) + answer(400, GARBAGE))
        await writer.drain()

    async def _answer(self, writer: asyncio.StreamWriter, action: str, status: int, key: str) -> bool:
        """Write this request's answer as `action` says; False when the connection is to be closed."""
        if action == "drop":
            return False
        if action == "late":
            once = answer(status, key, echo=self.echo)
            writer.write(once)
            await writer.drain()
            await asyncio.sleep(self.late_ms / 1000)
            if not writer.is_closing():
                writer.write(once)
                with self.lock:
                    self.late_copies += 1
            await writer.drain()
            return True
        if action == "huge":
            body = json.dumps({"id": key}).encode() + b" " * (1 << 20)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            return True
        if action == "cookie":
            writer.write(answer(status, key, extra_headers="Set-Cookie: session=planted; Path=/\r\n", echo=self.echo))
            await writer.drain()
            return True
        if action == "hang":
            await asyncio.sleep(10)
            return False
        if action == "extra":
            writer.write(answer(status, key, echo=self.echo) + answer(status, key, echo=self.echo))
        elif action == "short":
            writer.write(answer(status, key, length=4, echo=self.echo))
        elif action == "long":
            writer.write(answer(status, key, length=1000, echo=self.echo))
            await writer.drain()
            return False
        elif action == "split":
            for byte in answer(status, key, echo=self.echo):
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0)
        elif action == "408":
            writer.write(
                answer(status, key, echo=self.echo) + answer(408, "unsolicited", extra_headers="Connection: close\r\n")
            )
            await writer.drain()
            return False
        else:
            writer.write(answer(status, key, echo=self.echo))
        await writer.drain()
        return True

    async def _idle_408(self) -> int:
        closed = 0
        for writer in list(self.idle):
            writer.write(answer(408, "unsolicited", extra_headers="Connection: close\r\n"))
            await writer.drain()
            writer.close()
            closed += 1
        return closed

    def idle_408(self) -> int:
        """Send an unsolicited 408 and close on every idle connection; return how many (waits until done)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(self._idle_408(), self.loop).result(5)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            for writer in list(self.writers):
                writer.close()

    # --- control ---------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/push"

    def __enter__(self) -> "HostilePeer":
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True, name="hostile-h1")
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.loop is not None and self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)


def _headers(head: bytes) -> dict[str, str]:
    fields = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name:
            fields[name.strip().lower()] = value.strip()
    return fields

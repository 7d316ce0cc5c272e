"""HTTP/1.1 framing for the lean transport: a request's bytes out, one response's head and body in.

Why not h11 (which httpx uses): it re-validates every header of every request and response through
its event and state machinery, work a push worker would pay on every send.
A push client needs a small, strict subset of the protocol, written here:

- requests: method, target and headers checked once (no CR, LF or NUL can reach the wire, so a
  header value cannot smuggle a second request), the body framed by Content-Length;
- responses: status line `HTTP/1.x NNN`, headers as `name: value` lines (the head at most 64 KiB and
  100 fields), informational 1xx answers skipped, the body framed by Content-Length, by chunked
  transfer coding or by the connection's close;
- anything ambiguous is refused rather than guessed: Content-Length together with Transfer-Encoding,
  more than one Content-Length, a transfer coding other than chunked, folded header lines, a
  malformed chunk. A refusal raises `ProtocolError`; the transport then closes the connection.

`tests/notifications/test_http11.py` checks the parser against h11 on generated and hostile answers:
whatever this module accepts, h11 reads the same way.
"""

import asyncio
import re

MAX_HEAD = 64 * 1024
MAX_FIELDS = 100
_READ = 65536

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")  # visible ASCII: no space, control character or DEL
_VALUE = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*")  # no control character but HTAB
_STATUS = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\x00-\x08\x0a-\x1f\x7f]*)?")
_OWS = b" \t"
_NO_BODY = frozenset({204, 304})


class ProtocolError(Exception):
    """The peer's answer (or our own request) is not HTTP/1.1 this client accepts."""


class LocalProtocolError(ProtocolError):
    """Our request cannot be framed: nothing was sent."""


def request_bytes(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """The request on the wire; `headers` without Content-Length (added here from `body`)."""
    if not _TOKEN.fullmatch(method):
        raise LocalProtocolError(f"invalid method {method[:20]!r}")
    if not _TARGET.fullmatch(target):
        raise LocalProtocolError("the request target has a space or a control character")
    lines = [b"%s %s HTTP/1.1" % (method, target)]
    for name, value in headers:
        value = value.strip(_OWS)
        if not _TOKEN.fullmatch(name):
            raise LocalProtocolError(f"invalid header name {name[:40]!r}")
        if not _VALUE.fullmatch(value):
            raise LocalProtocolError(f"header {name.decode('ascii')!r} holds a line break or a control character")
        lines.append(name + b": " + value)
    lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class Response:
    """One response being read from `reader`: `head()` first, then `chunk()` until it returns b""."""

    __slots__ = (
        "reader", "status", "reason", "headers", "keep_alive", "complete", "bound", "_left", "_chunked", "_to_close",
    )  # fmt: skip

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False  # the connection may carry another exchange after this body
        self.complete = False  # the body was read to its end
        self.bound = False  # it echoed its request's Idempotency-Key: provably that request's answer
        self._left = 0  # bytes left of a Content-Length body or of the current chunk
        self._chunked = False
        self._to_close = False  # the body runs until the peer closes

    async def head(self, *, head_request: bool = False) -> None:
        """Read the status line and headers of the final (non-1xx) response."""
        budget = MAX_HEAD
        while True:
            (minor, status, reason), budget = await self._status_line(budget)
            fields, budget = await self._fields(budget)
            if status == 101:
                raise ProtocolError("the peer switched protocols")
            framing = _framing(fields)  # checked on interim answers too: they must be readable
            if status >= 200:
                break
            # 1xx: an interim answer; the final one follows.
        self.status, self.reason, self.headers = status, reason, fields
        self._frame(minor == b"1", status, framing, head_request)

    def field(self, name: bytes) -> bytes | None:
        """The value of header `name` (lower-case), the first if it repeats; None when absent."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    async def _status_line(self, budget: int) -> tuple[tuple[bytes, int, bytes], int]:
        """(HTTP minor version, status, reason) of the next status line, and the budget left."""
        line, budget = await self._line(budget)
        match = _STATUS.fullmatch(line)
        if match is None:
            raise ProtocolError(f"not an HTTP/1.x status line: {line[:40]!r}")
        status = int(match.group(2))
        if status < 100:
            # Three digits, but no status class: h11 (httpx's reader) refuses it, and "0xx" is no interim answer.
            raise ProtocolError(f"status code {status:03d} is below 100")
        return (match.group(1), status, match.group(3) or b""), budget

    async def _fields(self, budget: int) -> tuple[list[tuple[bytes, bytes]], int]:
        """The header fields up to the blank line, and the budget left."""
        fields: list[tuple[bytes, bytes]] = []
        while True:
            line, budget = await self._line(budget)
            if not line:
                return fields, budget
            fields.append(_field(line))
            if len(fields) > MAX_FIELDS:
                raise ProtocolError(f"more than {MAX_FIELDS} header fields")

    def _frame(self, http11: bool, status: int, framing: tuple[list[bytes], bool, bool], head_request: bool) -> None:
        """How the body is delimited, and whether the connection may carry another exchange after it."""
        lengths, chunked, close = framing
        self.keep_alive = http11 and not close
        if head_request or status in _NO_BODY:
            self.complete = True
        elif chunked:
            self._chunked = True
        elif lengths:
            self._left = int(lengths[0])
            self.complete = self._left == 0
        else:
            self._to_close = True
            self.keep_alive = False

    async def chunk(self) -> bytes:
        """The next piece of the body (at most 64 KiB); b"" once the body is complete."""
        if self.complete:
            return b""
        if self._to_close:
            data = await self.reader.read(_READ)
            self.complete = not data
            return data
        if self._chunked and self._left == 0 and not await self._next_chunk():
            return b""
        data = await self.reader.read(min(self._left, _READ))
        if not data:
            raise ProtocolError("the peer closed the connection in the middle of the body")
        self._left -= len(data)
        if self._left == 0:
            if self._chunked:
                if await self._exactly(2) != b"\r\n":
                    raise ProtocolError("a chunk not followed by CRLF")
            else:
                self.complete = True
        return data

    async def _next_chunk(self) -> bool:
        """Read the next chunk's size line; False after the last chunk (and its trailers)."""
        line, _ = await self._line(MAX_HEAD, crlf=True)
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise ProtocolError(f"a malformed chunk size line: {line[:40]!r}")
        self._left = int(match.group(1), 16)
        if self._left == 0:
            budget = MAX_HEAD
            while True:  # trailer fields, checked as header lines are (h11 refuses a malformed one) and dropped
                trailer, budget = await self._line(budget)
                if not trailer:
                    break
                _field(trailer)
            self.complete = True
        return not self.complete

    async def _line(self, budget: int, *, crlf: bool = False) -> tuple[bytes, int]:
        """One line without its CRLF (or bare LF, unless `crlf`), counted against `budget` bytes.

        A chunk size line must end in CRLF: h11 (httpx's reader) reads up to the first CRLF, so a bare
        LF there would make the two parsers disagree on where the chunk starts."""
        try:
            line = await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            raise ProtocolError("the peer closed the connection before a complete answer") from exc
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError("a line longer than 64 KiB") from exc
        budget -= len(line)
        if budget < 0:
            raise ProtocolError(f"an answer head longer than {MAX_HEAD // 1024} KiB")
        if crlf and not line.endswith(b"\r\n"):
            raise ProtocolError(f"a line not ended by CRLF: {line[:40]!r}")
        return line.rstrip(b"\n").removesuffix(b"\r"), budget

    async def _exactly(self, n: int) -> bytes:
        try:
            return await self.reader.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            raise ProtocolError("the peer closed the connection in the middle of the body") from exc


def _field(line: bytes) -> tuple[bytes, bytes]:
    """(name, value) of a header or trailer line; refuse folding, a malformed name or a control character."""
    if line[:1] in (b" ", b"\t"):
        raise ProtocolError("a folded header line (obsolete line folding)")
    name, colon, value = line.partition(b":")
    if not colon or not _TOKEN.fullmatch(name):
        raise ProtocolError(f"a malformed header line: {line[:40]!r}")
    value = value.strip(_OWS)
    if not _VALUE.fullmatch(value):
        raise ProtocolError(f"header {name[:40]!r} holds a control character")
    return name, value


def _framing(fields: list[tuple[bytes, bytes]]) -> tuple[list[bytes], bool, bool]:
    """(Content-Length values, chunked, Connection: close) of a response head; refuse ambiguous framing."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    connection: list[bytes] = []
    for name, value in fields:
        lower = name.lower()
        if lower == b"content-length":
            lengths.append(value)
        elif lower == b"transfer-encoding":
            codings += [part.strip(_OWS).lower() for part in value.split(b",")]
        elif lower == b"connection":
            connection += [part.strip(_OWS).lower() for part in value.split(b",")]
    # The framing headers are checked even where the status has no body: a 204 that carries
    # contradictory lengths is as unreadable as a 200 that does.
    if codings and lengths:
        raise ProtocolError("both Content-Length and Transfer-Encoding")
    if codings and codings != [b"chunked"]:
        raise ProtocolError(f"an unsupported transfer coding: {b', '.join(codings)[:40]!r}")
    if len(lengths) > 1:
        raise ProtocolError("more than one Content-Length")
    if lengths and (not lengths[0].isdigit() or len(lengths[0]) > 18):
        raise ProtocolError(f"an invalid Content-Length: {lengths[0][:20]!r}")
    return lengths, bool(codings), b"close" in connection

"""The lean HTTP/1.1 transport under httpx.AsyncClient: keep-alive, the connection bound, closes, hangs."""

import asyncio

import httpx
import pytest

from notifications.backends.http import ExchangeFailed, capped_request, make_client


class Server:
    """A tiny asyncio HTTP/1.1 server that counts connections and answers every request with `answer`."""

    def __init__(self, answer: bytes, *, delay: float = 0.0, close_after: int | None = None) -> None:
        self.answer = answer
        self.delay = delay
        self.close_after = close_after  # close each connection after this many answers
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self.requests = 0
        self.heads: list[bytes] = []  # each request's line and headers, as they arrived

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                self.requests += 1
                await asyncio.sleep(self.delay)
                writer.write(self.answer)
                await writer.drain()
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/push"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"id":"m1"}'
ECHOING = OK.replace(b"Content-Length", b"Idempotency-Key: k1\r\nContent-Length")  # for requests keyed k1


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


async def send(client: httpx.AsyncClient, url: str, deadline: float = 2.0, **headers: str):  # noqa: ANN201
    return await capped_request(client, "POST", url, deadline=deadline, content=b"{}", headers={"A": "b", **headers})


def test_keep_alive__sequential_sends_share_one_connection_when_answers_echo_their_key():
    async def go() -> Server:
        server = Server(ECHOING)
        async with server as url:
            client = make_client(timeout=2, concurrency=4)
            for _ in range(5):
                response = await capped_request(
                    client, "POST", url, deadline=2.0, content=b"{}", headers={"Idempotency-Key": "k1"}
                )
                assert (response.status, response.body) == (200, b'{"id":"m1"}')
            await client.aclose()
        return server

    server = run(go())
    assert (server.requests, server.connections) == (5, 1)


def test_keep_alive__an_answer_that_cannot_prove_it_is_its_requests_own_ends_its_connection():
    async def go() -> Server:
        server = Server(OK)  # no key to echo, and no echo
        async with server as url:
            client = make_client(timeout=2, concurrency=4)
            for _ in range(5):
                response = await send(client, url)
                assert (response.status, response.body) == (200, b'{"id":"m1"}')
            await client.aclose()
        return server

    server = run(go())
    assert (server.requests, server.connections) == (5, 5)
    assert all(b"\r\nConnection: close\r\n" in head for head in server.heads)


def test_pool__never_more_connections_than_the_concurrency():
    async def go() -> Server:
        server = Server(OK, delay=0.05)
        async with server as url:
            client = make_client(timeout=5, concurrency=3)
            answers = await asyncio.gather(*(send(client, url, 5) for _ in range(12)))
            await client.aclose()
        assert {a.status for a in answers} == {200}
        return server

    server = run(go())
    assert server.requests == 12 and server.max_open == 3


def test_peer_closing_an_idle_connection__next_send_opens_a_new_one():
    async def go() -> Server:
        server = Server(ECHOING, close_after=1)  # answers that would keep the connection, but for the close
        async with server as url:
            client = make_client(timeout=2, concurrency=2)
            for _ in range(3):
                await send(client, url, **{"Idempotency-Key": "k1"})
                await asyncio.sleep(0.05)  # the peer's close reaches us before the next send
            await client.aclose()
        return server

    server = run(go())
    assert (server.requests, server.connections) == (3, 3)


def test_hang_after_sending__bounded_by_the_deadline_and_marked_as_maybe_sent():
    async def go() -> ExchangeFailed:
        server = Server(OK, delay=5)
        async with server as url:
            client = make_client(timeout=5, concurrency=1)
            with pytest.raises(ExchangeFailed) as failed:
                await send(client, url, deadline=0.3)
            await client.aclose()
        return failed.value

    failure = run(go())
    assert (failure.kind, failure.sent) == ("timeout", True)


def test_connection_refused__not_sent():
    async def go() -> ExchangeFailed:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = make_client(timeout=2, concurrency=1)
        with pytest.raises(ExchangeFailed) as failed:
            await send(client, f"http://127.0.0.1:{port}/push")
        await client.aclose()
        return failed.value

    failure = run(go())
    assert (failure.kind, failure.sent) == ("unreachable", False)


def _header_list(head: bytes) -> list[tuple[bytes, bytes]]:
    fields = (line.partition(b":") for line in head.rstrip(b"\r\n").split(b"\r\n")[1:])
    return sorted((name.strip().lower(), value.strip()) for name, _, value in fields)


def _headers(head: bytes) -> dict[bytes, bytes]:
    return dict(_header_list(head))


def test_lean_path__sends_what_httpx_itself_would_send():
    """The hot path skips httpx's client layer; the request on the wire must not change because of it."""

    async def go() -> Server:
        server = Server(OK)
        async with server as url:
            lean = make_client(timeout=2, concurrency=1)
            plain = httpx.AsyncClient(timeout=2)  # httpx's own transport and client layers
            assert getattr(lean, "lean", None) is not None and getattr(plain, "lean", None) is None
            for client in (lean, plain):
                headers = {"Authorization": "Bearer t", "Idempotency-Key": "k-1", "accept": "application/json"}
                response = await capped_request(
                    client, "POST", url + "?x=1", deadline=2, headers=headers, content=b'{"a":1}'
                )
                assert (response.status, response.body, response.headers["content-type"]) == (
                    200,
                    b'{"id":"m1"}',
                    "application/json",
                )
                await client.aclose()
        return server

    server = run(go())
    lean_head, plain_head = server.heads
    assert lean_head.split(b"\r\n")[0] == plain_head.split(b"\r\n")[0] == b"POST /push?x=1 HTTP/1.1"
    assert _header_list(lean_head) == _header_list(plain_head)  # the same headers, none twice
    assert _headers(lean_head)[b"accept"] == b"application/json"  # the caller's value replaced the default
    assert _headers(lean_head)[b"accept-encoding"] == b"identity"


def test_lean_path__a_body_past_the_cap_is_cut_and_its_connection_not_reused():
    big = b"x" * 5000
    answer = b"HTTP/1.1 500 Oops\r\nIdempotency-Key: k1\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)

    async def go() -> tuple[Server, list[tuple[int, bool, int]]]:
        server = Server(answer)
        seen = []
        async with server as url:
            client = make_client(timeout=2, concurrency=1)
            for cap in (100, 100_000):
                response = await capped_request(
                    client, "POST", url, deadline=2, content=b"{}", cap=cap, headers={"Idempotency-Key": "k1"}
                )
                seen.append((response.status, response.truncated, len(response.body)))
            await client.aclose()
        return server, seen

    server, seen = run(go())
    assert seen == [(500, True, 100), (500, False, 5000)]
    assert server.connections == 2  # the cut exchange left unread bytes behind: its connection was closed


def test_lean_path__a_header_value_with_a_line_break_is_refused_before_sending():
    async def go() -> tuple[Server, ExchangeFailed]:
        server = Server(OK)
        async with server as url:
            client = make_client(timeout=2, concurrency=1)
            with pytest.raises(ExchangeFailed) as failed:
                await capped_request(client, "POST", url, deadline=2, content=b"{}", headers={"X": "a\r\nEvil: 1"})
            await client.aclose()
        return server, failed.value

    server, failure = run(go())
    assert (failure.kind, failure.sent, server.requests) == ("unreachable", False, 0)


def test_url_with_userinfo__takes_httpx_path_and_sends_basic_auth():
    async def go() -> Server:
        server = Server(OK)
        async with server as url:
            client = make_client(timeout=2, concurrency=1)
            await capped_request(client, "POST", url.replace("http://", "http://me:pw@"), deadline=2, content=b"{}")
            await client.aclose()
        return server

    (head,) = run(go()).heads
    assert _headers(head)[b"authorization"] == b"Basic bWU6cHc="

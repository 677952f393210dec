"""A request sent on a pooled connection the server was closing (issue 36: 1-4 of 2,000 tiny
requests failed under host load, "Server disconnected without sending a response" or a broken
pipe, requests the engine never saw). Every HTTP client has this race: a keep-alive server closes
a connection it has seen idle while the client, which still holds it as idle in its pool, sends
the next request on it. Go's net/http sends such a request again on a fresh connection; so does
the load generator, once, and counts it (`reconnected`).

The server here makes the race certain: it answers the first request on a connection and closes
the connection, unread, as the next request arrives on it (its keep-alive timer firing at that
instant). It is a real server on real sockets, in this loop, and it counts what it answered and
what it closed on unread: those are the witnesses that no request is lost, none answered twice
(answered == sent, exactly), and that `reconnected` counts the closed sends.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from infra_agent.serving.loadgen import Arrivals, BenchRequest, Endpoint, run_benchmark
from infra_agent.serving.loadgen.client import stream_one
from infra_agent.serving.loadgen.metrics import RequestRecord

pytestmark = pytest.mark.anyio


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + _chunked(b'data: {"choices": [{"index": 0, "text": "ab"}]}\n\n')
    + _chunked(b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n')
    + _chunked(b"data: [DONE]\n\n")
    + b"0\r\n\r\n"
)


class OneRequestPerConnection:
    """Answers the first request on each connection; the next one that arrives on it is closed
    on unread (the connection's receive queue still holds it, so the client sees a reset)."""

    def __init__(self, family: int, address):
        self.answered = 0  # requests read and answered
        self.closed_unread = 0  # requests that arrived on a used connection and were never read
        self.listening = socket.socket(family, socket.SOCK_STREAM)
        self.listening.bind(address)
        self.listening.listen(64)
        self.listening.setblocking(False)
        self.address = self.listening.getsockname()
        self._tasks: set[asyncio.Task] = set()

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self.listening)
            task = asyncio.create_task(self._connection(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connection(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await loop.sock_recv(conn, 65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += await loop.sock_recv(conn, 65536)
            await loop.sock_sendall(conn, RESPONSE)
            self.answered += 1
            await _readable(conn)  # idle until the client sends again (or leaves)
            try:
                if conn.recv(1, socket.MSG_PEEK):
                    self.closed_unread += 1  # a request waits, unread: closed on it
            except ConnectionError:
                pass
        finally:
            conn.close()

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.listening.close()


async def _readable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(sock.fileno(), lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


@pytest.fixture(params=["unix", "tcp"])
async def server(request, tmp_path):
    if request.param == "unix":
        srv = OneRequestPerConnection(socket.AF_UNIX, str(tmp_path / "engine.sock"))
        ep = Endpoint("http://engine", model="m", uds=srv.address)
    else:
        srv = OneRequestPerConnection(socket.AF_INET, ("127.0.0.1", 0))
        ep = Endpoint(f"http://127.0.0.1:{srv.address[1]}", model="m")
    serving = asyncio.create_task(srv.serve())
    yield srv, ep
    serving.cancel()
    srv.close()


async def test_a_request_the_server_closed_its_reused_connection_on_is_sent_again(server):
    """Before the fix: every request sent on a used connection failed ("Server disconnected
    without sending a response", or a reset)."""
    srv, ep = server
    n = 8
    reqs = [BenchRequest(f"p{i}", 3, 2) for i in range(n)]
    result = await run_benchmark(ep, reqs, Arrivals(max_concurrency=2))
    m = result.metrics
    assert (m.completed, m.failed) == (n, 0), m.errors
    assert srv.answered == n  # every request answered once: a closed send was never read
    assert srv.closed_unread >= 1  # the race happened (every reuse meets it)
    assert m.reconnected == srv.closed_unread == sum(r.reconnected for r in result.records)
    assert all(r.output_tokens == 2 for r in result.records)


async def test_the_second_send_takes_a_fresh_connection_not_another_idle_one(server):
    """Two connections sit idle in the pool, each used once; a request goes out on one and is
    closed on: sent again on the other idle one, it would be closed on too. It goes out on a new
    connection (the idle one is closed unused, as an expired one is)."""
    srv, ep = server
    async with ep.client(max_connections=2, timeout_s=30) as client:
        first = [RequestRecord(index=i, scheduled_s=0.0) for i in range(2)]
        await asyncio.gather(
            *(stream_one(client, ep, BenchRequest(f"a{i}", 3, 2), r) for i, r in enumerate(first))
        )
        assert all(r.ok and not r.reconnected for r in first), [r.error for r in first]
        rec = await stream_one(client, ep, BenchRequest("b", 3, 2), RequestRecord(2, 0.0))
    assert rec.ok, rec.error
    assert rec.reconnected and rec.output_tokens == 2
    assert (srv.answered, srv.closed_unread) == (3, 1)


async def test_a_fresh_connection_closed_unanswered_stays_a_failure(tmp_path):
    """Only a reused connection's close is the keep-alive race: a server that closes a new
    connection without answering failed the request, and it is not sent again."""
    path = str(tmp_path / "engine.sock")
    arrived = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal arrived
        await reader.readuntil(b"\r\n\r\n")
        arrived += 1
        writer.close()

    listening = await asyncio.start_unix_server(hang_up, path)
    ep = Endpoint("http://engine", model="m", uds=path)
    try:
        async with ep.client(max_connections=1, timeout_s=30) as client:
            rec = await stream_one(client, ep, BenchRequest("x", 3, 2), RequestRecord(0, 0.0))
    finally:
        listening.close()
    assert not rec.ok and not rec.reconnected, rec
    assert arrived == 1

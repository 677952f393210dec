"""HTTP over the engine's UNIX socket (serving/unix_http.py), against a scripted server in this loop.

The server is an asyncio UNIX server in the test's own event loop, so a test can make a
chunk arrive and cancel the request in the same loop iteration: the race that anyio's
raw-socket stream (what `httpx.AsyncHTTPTransport(uds=...)` uses) turns into an
"Exception in callback Future.set_result(None)" in the loop. Swapping
`UnixSocketTransport` for that transport makes the first test fail (checked by hand).
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from infra_agent.serving.loadgen import Endpoint
from infra_agent.serving.unix_http import UnixSocketTransport

pytestmark = pytest.mark.anyio

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class Server:
    """Answers every request with a chunked stream whose chunks the test writes."""

    def __init__(self):
        self.writers: list[asyncio.StreamWriter] = []
        self.arrived = asyncio.Condition()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        writer.write(HEAD + _chunk(b"data: 0\n\n"))
        async with self.arrived:
            self.writers.append(writer)
            self.arrived.notify_all()
        try:
            await reader.read()  # until the client goes away
        except ConnectionError:
            pass

    async def wait_for(self, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.writers) >= count)


@pytest.fixture
async def server(tmp_path):
    scripted = Server()
    path = str(tmp_path / "engine.sock")
    listening = await asyncio.start_unix_server(scripted.handle, path, backlog=1024)
    scripted.path = path
    yield scripted
    listening.close()


async def test_a_request_cancelled_as_its_chunk_arrives_leaves_the_loop_clean(server):
    loop = asyncio.get_running_loop()
    problems: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))
    try:
        async with httpx.AsyncClient(
            base_url="http://engine", transport=UnixSocketTransport(server.path)
        ) as client:
            for _ in range(20):
                read_first = asyncio.Event()

                async def stream(read_first: asyncio.Event = read_first) -> None:
                    async with client.stream("GET", "/") as resp:
                        async for _ in resp.aiter_raw():
                            read_first.set()

                task = asyncio.create_task(stream())
                await read_first.wait()  # the client now waits for the next chunk
                await asyncio.sleep(0.01)
                server.writers[-1].write(_chunk(b"data: 1\n\n"))  # readable in the next select...
                loop.call_soon(task.cancel)  # ...and cancelled just before its reader runs
                with pytest.raises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.01)
    finally:
        loop.set_exception_handler(None)
    assert problems == [], [c.get("message") for c in problems]


async def test_the_pool_holds_as_many_connections_as_the_endpoint_asks(server):
    """httpx ignores a client's limits when it is handed a transport: before this transport,
    a benchmark over the bridge queued every request past the 100th in the client's pool,
    and that queueing counted in its latencies."""
    ep = Endpoint("http://engine", model="m", uds=server.path)
    async with ep.client(max_connections=150, timeout_s=30) as client:

        async def one() -> None:
            async with client.stream("GET", "/") as resp:
                async for _ in resp.aiter_raw():
                    pass

        tasks = [asyncio.create_task(one()) for _ in range(150)]
        try:
            await asyncio.wait_for(server.wait_for(150), 20)  # all 150 open at once
        finally:
            for writer in server.writers:
                writer.write(b"0\r\n\r\n")  # the last chunk: every stream ends
            await asyncio.gather(*tasks)
    assert len(server.writers) == 150


async def test_a_missing_socket_is_an_httpx_connect_error(tmp_path):
    transport = UnixSocketTransport(str(tmp_path / "none.sock"))
    async with httpx.AsyncClient(base_url="http://engine", transport=transport) as client:
        with pytest.raises(httpx.ConnectError, match="none.sock"):
            await client.get("/health")


async def test_connections_wait_for_a_full_accept_queue_instead_of_failing(tmp_path):
    """Issue 36: a connect() to a UNIX socket whose accept queue is full fails at once (EAGAIN);
    asyncio took that for "in progress" and returned an unconnected socket, whose first read
    failed with "[Errno 22] Invalid argument" (418 of 5,000 requests of one benchmark). A
    server with a queue of 2 that accepts late: all 40 requests, opened at once, are answered."""
    path = str(tmp_path / "engine.sock")
    answered = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        answered += 1
        writer.close()

    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(path)
    listening.listen(2)  # queues 2 (+1) connections; accepted only once the server starts serving
    server = await asyncio.start_unix_server(handle, sock=listening, backlog=2, start_serving=False)
    ep = Endpoint("http://engine", model="m", uds=path)
    async with ep.client(max_connections=40, timeout_s=30) as client:
        tasks = [asyncio.create_task(client.get("/")) for _ in range(40)]
        await asyncio.sleep(0.3)  # every connect() has been tried: the queue is full
        await server.start_serving()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    server.close()
    failed = [repr(r) for r in results if isinstance(r, BaseException)]
    assert failed == [] and answered == 40, failed[:3]

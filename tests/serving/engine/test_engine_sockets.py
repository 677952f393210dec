"""Every TCP server we start sends small writes at once (TCP_NODELAY on accepted connections).

Without it, Nagle's algorithm holds each streamed chunk after the first until the client's
delayed ACK: the built-in engine's closed-loop TTFT read 43 ms for an engine TTFT of 8 ms and
its tokens arrived in one burst (issue 21). asyncio sets TCP_NODELAY on an accepted connection
only when the listening socket was made with proto IPPROTO_TCP, so the test asks the accepted
socket itself, through the same asyncio path uvicorn uses (create_server(sock=...)).
The behaviour end to end is tests/serving/engine/test_engine_client_truth.py.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from infra_agent.serving.tcp import listen_socket

pytestmark = pytest.mark.anyio


async def _accepted_nodelay(sock: socket.socket) -> int:
    """TCP_NODELAY of the server side of one connection accepted on `sock` by asyncio."""
    seen: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_connect(reader, writer):
        seen.set_result(
            writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        )
        writer.close()

    server = await asyncio.start_server(on_connect, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        value = await asyncio.wait_for(seen, 10)
        writer.close()
    return value


async def test_accepted_connections_have_tcp_nodelay():
    """serving/tcp.py's socket, the one the engine and the MCP server's --http both listen on."""
    assert await _accepted_nodelay(listen_socket("127.0.0.1", 0)) != 0


async def test_a_plain_af_inet_socket_would_not_have_it():
    """The control: the socket the engine made before (proto 0) gets Nagle on accepted connections,
    so the test above can tell a fixed socket from the old one."""
    sock = socket.socket(socket.AF_INET)
    sock.bind(("127.0.0.1", 0))
    assert await _accepted_nodelay(sock) == 0


async def test_the_sandbox_bridge_connects_upstream_with_tcp_nodelay():
    """engine_host's relay reaches the engine with asyncio.open_connection('127.0.0.1', port), whose
    socket comes from getaddrinfo (proto IPPROTO_TCP), so asyncio sets TCP_NODELAY on it; its other
    side is a UNIX socket (no Nagle). Asserted on the relay's own upstream connection."""
    from infra_agent.sandbox.worker import engine_host

    upstream = listen_socket("127.0.0.1", 0)
    port = upstream.getsockname()[1]
    made: list[int] = []  # TCP_NODELAY of each connection the relay opened
    real_open = asyncio.open_connection

    async def recording_open(*args, **kwargs):
        reader, writer = await real_open(*args, **kwargs)
        made.append(
            writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        )
        return reader, writer

    async def echo(reader, writer):
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, sock=upstream)
    a, b = socket.socketpair()
    async with server:
        bridge_reader, bridge_writer = await asyncio.open_connection(sock=a)
        client_reader, client_writer = await asyncio.open_connection(sock=b)
        asyncio.open_connection = recording_open
        try:
            relay = asyncio.ensure_future(engine_host._relay(bridge_reader, bridge_writer, port))
            client_writer.write(b"ping")
            assert await asyncio.wait_for(client_reader.read(100), 10) == b"ping"
            await asyncio.wait_for(relay, 10)
        finally:
            asyncio.open_connection = real_open
    assert made and made[0] != 0

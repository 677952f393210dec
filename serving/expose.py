"""An engine opened to the user's own clients: a TCP port on 127.0.0.1 relayed to its socket.

    port = await ExposedPort.open(engine_socket, port=0, token="s3cret")
    port.url                  # http://127.0.0.1:PORT, for curl, `vllm bench serve`, guidellm
    await port.aclose()       # with the engine (Engines.stop)

An engine listens only on a UNIX socket in its own folder (the sandbox's bridge); this relays
each TCP connection to one connection on that socket, bytes unchanged, so any OpenAI client
on this host reaches it. Only loopback: nothing off this host can connect. The listening
socket comes from serving/tcp.py (TCP_NODELAY on every accepted connection: without it small
SSE writes stall ~40 ms, FACTS.md), and the relay's writes to the client go out as they come.

With `token`, the first request of each connection must carry `Authorization: Bearer TOKEN`;
a connection whose first request does not is answered 401 and closed (later requests on an
accepted connection pass: they come from the client that proved it has the token).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac

from .tcp import listen_socket
from .unix_http import open_unix_stream

HOST = "127.0.0.1"
_CHUNK = 1 << 16


class ExposedPort:
    def __init__(self, server: asyncio.Server, port: int, token: str | None):
        self._server, self.port, self.token = server, port, token
        self._relays: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @classmethod
    async def open(cls, socket_path: str, port: int = 0, token: str | None = None) -> ExposedPort:
        """Listen on 127.0.0.1:`port` (0: a free one) and relay to `socket_path`. A busy port is
        an OSError from here, before anything is announced."""
        sock = listen_socket(HOST, port)
        holder: list[ExposedPort] = []

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            exposed = holder[0]
            exposed._relays.add(task)
            try:
                await _relay(reader, writer, socket_path, token)
            except asyncio.CancelledError:
                # aclose() cut it: end quietly. Python 3.11's stream callback reads a cancelled
                # handler task's exception and logged each one as an ERROR with its traceback
                # (~3 KB of stderr per open connection at Ctrl-C)
                pass
            finally:
                exposed._relays.discard(task)

        server = await asyncio.start_server(on_connect, sock=sock, backlog=4096)
        exposed = cls(server, sock.getsockname()[1], token)
        holder.append(exposed)
        return exposed

    async def aclose(self) -> None:
        """Stop listening and cut every relayed connection."""
        self._server.close()
        for task in list(self._relays):
            task.cancel()
        for task in list(self._relays):
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)


async def _relay(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, socket_path: str, token: str | None
) -> None:
    up_writer: asyncio.StreamWriter | None = None
    try:
        first = b""
        if token is not None:
            try:
                first = await reader.readuntil(b"\r\n\r\n")  # at most the reader's 64 KiB
            except asyncio.LimitOverrunError:
                return await _refuse(writer, 431, "request head too large")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if not _has_token(first, token):
                return await _refuse(
                    writer,
                    401,
                    "this engine's port needs the header Authorization: Bearer TOKEN "
                    "(launch_serve's expose.token)",
                )
        try:
            up_reader, up_writer = await open_unix_stream(socket_path, timeout_s=10.0)
        except OSError as exc:
            return await _refuse(writer, 502, f"the engine's socket did not answer: {exc}")
        if first:
            up_writer.write(first)
        await asyncio.gather(
            _pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True
        )
    finally:
        writer.close()
        if up_writer is not None:
            up_writer.close()


def _has_token(head: bytes, token: str) -> bool:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            scheme, _, given = value.strip().partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(
                given.strip(), token.encode()
            )
    return False


async def _refuse(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    reason = {401: "Unauthorized", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}
    body = f'{{"error": {{"message": "{why}", "code": {status}}}}}'.encode()
    writer.write(
        f"HTTP/1.1 {status} {reason[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction until its end, which is passed on as an end (a half-close), so the other
    direction finishes what it is sending."""
    while data := await reader.read(_CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()

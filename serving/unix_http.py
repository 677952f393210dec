"""httpx over a UNIX socket (the sandbox bridge to an engine), on asyncio's own streams.

Why not `httpx.AsyncHTTPTransport(uds=...)`: its socket comes from anyio's raw-socket stream
(anyio 4.16), which waits for a readable socket with `loop.add_reader(sock, f.set_result, None)`
and removes that reader only from a done-callback. When a request is cancelled in the same loop
iteration in which its socket became readable (a benchmark's timeout_s cancelling 256 streaming
requests does this), the reader still fires on the cancelled future: "Exception in callback
Future.set_result(None) ... InvalidStateError" lands in the event loop's exception handler (and
fails a test run under anyio's pytest plugin). asyncio's StreamReader wakes its waiter only
if it is not cancelled, so the race does not exist here
(tests/serving/loadgen/test_unix_http.py shows both).

A second reason: a transport handed to `httpx.AsyncClient(transport=...)` ignores the client's
`limits`, so the load generator's `max_connections` never reached the pool, which capped it at
httpx's default 100 connections; here the limits are the transport's own.

A third: connecting. A non-blocking connect() to a UNIX socket whose accept queue is full fails
at once with EAGAIN (it never "completes later" as TCP's EINPROGRESS does), and asyncio's
`sock_connect` (so `open_unix_connection`) takes EAGAIN for EINPROGRESS: it waits for the socket
to be writable, reads SO_ERROR 0 and hands back a socket that was never connected, whose first
read fails with "[Errno 22] Invalid argument" (issue 36: 418 of 5,000 requests failed so when
256 connections opened at once against the relay's accept queue of 100). Here connect() is
retried until the queue has room or the connect timeout passes (`open_unix_stream`).
"""

from __future__ import annotations

import asyncio
import errno
import select
import socket
import ssl
import typing

import httpcore
import httpx


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout(
                f"no data from the engine's socket within {timeout} s"
            ) from None
        except OSError as exc:
            raise httpcore.ReadError(f"reading from the engine's socket: {exc}") from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(buffer)
                await self._writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout(
                f"the engine's socket took no data within {timeout} s"
            ) from None
        except OSError as exc:
            raise httpcore.WriteError(f"writing to the engine's socket: {exc}") from exc

    async def aclose(self) -> None:
        self._writer.close()  # not waiting for the peer: a cancelled request must close at once

    async def start_tls(
        self, ssl_context, server_hostname=None, timeout=None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS over the engine's UNIX socket is not supported")

    def get_extra_info(self, info: str) -> typing.Any:
        if info == "is_readable":  # asked of an idle pooled connection: did the server close it?
            if self._reader.at_eof() or self._writer.is_closing():
                return True
            # the close may still sit unread in the socket (the loop has not run since): ask it
            sock = self._writer.get_extra_info("socket")
            if sock is None:
                return False
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
            return bool(poller.poll(0))
        if info == "socket":
            return self._writer.get_extra_info("socket")
        return None


class UnixBackend(httpcore.AsyncNetworkBackend):
    """Every connection goes to one UNIX socket, whatever host the URL names."""

    def __init__(self, path: str):
        self.path = path

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return await self.connect_unix_socket(self.path, timeout)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        try:
            reader, writer = await open_unix_stream(self.path, timeout)
        except TimeoutError:
            raise httpcore.ConnectTimeout(
                f"connecting to {self.path} took over {timeout} s"
            ) from None
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot connect to {self.path}: {exc}") from exc
        return _Stream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


CONNECT_RETRY_S = (0.001, 0.05)  # first and longest wait between connect() tries on a full queue


async def open_unix_stream(
    path: str, timeout_s: float | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio streams on a connection to the UNIX socket at `path`, waiting up to `timeout_s`
    (TimeoutError) while its accept queue is full, never handed back unconnected."""
    async with asyncio.timeout(timeout_s):
        sock = await _connect(path)
    return await asyncio.open_unix_connection(sock=sock, limit=1 << 20)


async def _connect(path: str) -> socket.socket:
    """A socket connected to `path`, waiting while its accept queue is full (EAGAIN) instead of
    returning an unconnected one (see the module's docstring). The caller bounds the wait."""
    wait_s = CONNECT_RETRY_S[0]
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)  # AF_UNIX: connected at once, or EAGAIN while the queue is full
            return sock
        except BlockingIOError as exc:
            sock.close()
            if exc.errno != errno.EAGAIN:
                raise
        except BaseException:
            sock.close()
            raise
        await asyncio.sleep(wait_s)
        wait_s = min(2 * wait_s, CONNECT_RETRY_S[1])


class PooledTransport(httpx.AsyncHTTPTransport):
    """An httpx transport whose connections come from `backend`, pooled within `limits` (its
    own: see the module's docstring); https URLs verify with `ssl_context` (else httpcore's
    default, made when one is first needed)."""

    def __init__(
        self,
        backend: httpcore.AsyncNetworkBackend,
        limits: httpx.Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ):
        limits = limits or httpx.Limits(max_connections=100)  # httpx's own default
        super().__init__(limits=limits)
        # httpx takes no network backend; its pool does. Replaced before any connection exists.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )


class UnixSocketTransport(PooledTransport):
    """An httpx transport whose connections all go to the UNIX socket at `path`, pooled within `limits`."""

    def __init__(self, path: str, limits: httpx.Limits | None = None):
        super().__init__(UnixBackend(path), limits)

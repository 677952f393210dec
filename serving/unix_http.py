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
"""

from __future__ import annotations

import asyncio
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
            return self._reader.at_eof() or self._writer.is_closing()
        if info == "socket":
            return self._writer.get_extra_info("socket")
        return None


class _UnixBackend(httpcore.AsyncNetworkBackend):
    """Every connection goes to one UNIX socket, whatever host the URL names."""

    def __init__(self, path: str):
        self.path = path

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return await self.connect_unix_socket(self.path, timeout)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(self.path, limit=1 << 20)
        except TimeoutError:
            raise httpcore.ConnectTimeout(
                f"connecting to {self.path} took over {timeout} s"
            ) from None
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot connect to {self.path}: {exc}") from exc
        return _Stream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class UnixSocketTransport(httpx.AsyncHTTPTransport):
    """An httpx transport whose connections all go to the UNIX socket at `path`, pooled within `limits`."""

    def __init__(self, path: str, limits: httpx.Limits | None = None):
        limits = limits or httpx.Limits(max_connections=100)  # httpx's own default
        super().__init__(limits=limits)
        # httpx takes no network backend; its pool does. Replaced before any connection exists.
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_UnixBackend(path),
        )

"""The stdio transport: the MCP SDK's stdio streams, plus two things it leaves out.

- A line the SDK cannot parse (invalid JSON, a lone surrogate, nesting or a number its
  parser refuses, valid JSON that is no JSON-RPC message) reaches the SDK's dispatcher as
  an exception, which it logs and drops: the client would wait forever. Here it gets a
  JSON-RPC error reply (-32700 parse error, -32600 invalid request) carrying the request's
  id when one can be read from the line, else null.
- SIGTERM stops the server the way HTTP does: no new calls, running ones get
  SHUTDOWN_GRACE_S to finish, then they are cancelled and their rows marked interrupted.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

log = logging.getLogger("infra_agent.server")

SHUTDOWN_GRACE_S = 10.0  # how long running calls may finish after SIGTERM (stdio and HTTP)
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,15}(?![\d.eE])|"(?:[^"\\]|\\.){0,200}")')


async def serve_stdio(server, grace_s: float = SHUTDOWN_GRACE_S) -> None:
    """Serve until stdin closes or SIGTERM arrives; then close the server (sandbox, ledger)."""
    lowlevel = (
        server._lowlevel_server
    )  # what MCPServer.run_stdio_async drives; we add a filter in between
    try:
        async with stdio_server() as (read_stream, write_stream):
            async with anyio.create_task_group() as tg:
                stop = _SigtermStop(server, grace_s, tg.cancel_scope)
                tg.start_soon(stop.watch)
                answering = ParseErrorAnswering(read_stream, write_stream)
                await lowlevel.run(
                    answering, write_stream, lowlevel.create_initialization_options()
                )
                tg.cancel_scope.cancel()  # stdin closed: stop watching for signals
            if stop.signalled:
                # The SDK reads stdin in a thread blocked in read(), which nothing can cancel:
                # leaving stdio_server() would wait until the client writes or closes stdin.
                # Everything of ours is closed first; then the process ends here.
                with anyio.CancelScope(shield=True):
                    await server.aclose()
                sys.stderr.flush()
                os._exit(0)
    finally:
        with anyio.CancelScope(shield=True):
            await server.aclose()


class _SigtermStop:
    def __init__(self, server, grace_s: float, scope: anyio.CancelScope):
        self.server, self.grace_s, self.scope = server, grace_s, scope
        self.signalled = False

    async def watch(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                self.signalled = True
                drained = await self.server.state.drain(self.grace_s)
                log.warning(
                    "SIGTERM: %s",
                    "no call was running"
                    if drained
                    else f"calls still running after {self.grace_s:g} s are cancelled and marked interrupted",
                )
                self.scope.cancel()
                return


class ParseErrorAnswering:
    """The SDK's read stream, minus the exceptions it yields for unparseable lines: each
    is answered with a JSON-RPC error on the write stream instead of being dropped."""

    def __init__(self, inner, write_stream):
        self._inner = inner
        self._write = write_stream

    def __getattr__(self, name: str) -> Any:  # last_context and whatever else the SDK reads
        return getattr(self._inner, name)

    async def receive(self) -> SessionMessage:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._write.send(SessionMessage(error_reply(item)))

    def __aiter__(self):
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self):
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc) -> bool | None:
        return await self._inner.__aexit__(*exc)


def error_reply(exc: Exception) -> types.JSONRPCError:
    """The JSON-RPC error for a line that failed to parse (exc holds the line)."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    line = errors[0].get("input") if errors and isinstance(errors[0].get("input"), str) else ""
    is_json = bool(errors) and errors[0].get("type") != "json_invalid"
    code, what = (
        (types.INVALID_REQUEST, "Invalid Request")
        if is_json
        else (types.PARSE_ERROR, "Parse error")
    )
    why = (
        "the line is JSON but not a JSON-RPC 2.0 message"
        if is_json
        else "the line is not JSON this server accepts (malformed, a lone UTF-16 surrogate, nesting deeper "
        "than the parser allows, or a number too long)"
    )
    log.warning("stdio: answered an unparseable line (%d chars) with %s", len(line), code)
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=_request_id(line),
        error=types.ErrorData(code=code, message=what, data=why),
    )


def _request_id(line: str) -> int | str | None:
    """The id of the request on `line`, if it can be read (the request itself could not)."""
    try:
        value = json.loads(line, parse_int=_bounded_int)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict) and "id" in value:
        found = value["id"]
        return found if isinstance(found, (int, str)) and not isinstance(found, bool) else None
    match = _ID.search(line[:10_000]) if value is None else None
    if match is None:
        return None
    try:
        return json.loads(match.group(1))
    except ValueError:
        return None


def _bounded_int(text: str) -> int | None:
    return int(text) if len(text) <= 18 else None

"""What the benches share: an MCP session on a fresh copy of the embedded zoo (with a tiny
checkpoint built in it at `tiny`, for the serving benches), and a tool call that stops the bench
on a tool error.
(Imported by the scripts beside it: `python bench/<script>.py` puts this folder on sys.path.)"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from mcp import Client

from infra_agent.kernels.workspace import EMBEDDED_ROOT
from infra_agent.server.app import build_server
from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint


@contextlib.asynccontextmanager
async def zoo_session(
    prefix: str, *, tiny_checkpoint: bool = False, prepare: Callable[[Path], None] | None = None
):
    """An in-memory MCP client on a temporary copy of the zoo (`prepare(workspace)` may add to
    it first); the server (and every engine it started) closes after, and the copy is removed."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        ws = Path(tmp) / "ws"
        shutil.copytree(EMBEDDED_ROOT, ws, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if tiny_checkpoint:
            build_tiny_checkpoint(ws / "tiny")
        if prepare is not None:
            prepare(ws)
        server = build_server(ws)
        try:
            async with Client(server) as client:
                yield client
        finally:
            await server.aclose()


async def call(client, tool, **args) -> dict:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")
    return result.structured_content

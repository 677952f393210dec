"""Commands that reach the tools through the in-memory MCP client: `tools` (list them),
`call` (one call) and `open-engine` (launch_serve held open for your own clients)."""

from __future__ import annotations

import signal
import sys
from typing import Annotated, Optional

import anyio
import typer

from .. import render
from . import call_args
from .common import (
    AllowUnsandboxedOpt,
    JsonOpt,
    WorkspaceOpt,
    build,
    err,
    fail,
    no_such_tool,
    out,
    print_json,
    warn_tools_not_loaded,
)


def list_tools(
    tool: Annotated[
        Optional[str],
        typer.Argument(
            help="A tool: print its arguments and the fields `expect` may name, with units."
        ),
    ] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """List the tools with their one-line descriptions, or one tool's arguments."""
    server = build(workspace)
    warn_tools_not_loaded(server)
    if tool is not None:
        spec = server.tools.get(tool)
        if spec is None:
            raise no_such_tool(server, tool)
        render.tool_arguments(out, spec)
        return
    render.tool_table(out, anyio.run(server.list_tools))


def call(
    tool: Annotated[str, typer.Argument(help="Tool name (see `infra-agent tools`).")],
    args: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Arguments: one JSON object, or key=value pairs (values parsed as JSON when they are; "
            "a single value for a list field is a one-item list: dtypes=float32)."
        ),
    ] = None,
    as_json: JsonOpt = False,
    workspace: WorkspaceOpt = None,
    allow_unsandboxed: AllowUnsandboxedOpt = False,
) -> None:
    """Call one tool in-process, through the same MCP server an agent uses."""
    try:
        arguments = call_args.parse_arguments(args or [])
    except ValueError as exc:
        raise fail(str(exc)) from None
    server = build(workspace, allow_unsandboxed)
    spec = server.tools.get(tool)
    if spec is None:
        raise no_such_tool(server, tool)
    arguments = call_args.lists_from_scalars(arguments, spec.input_model.model_json_schema())
    result = anyio.run(_call, server, tool, arguments)
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        refused = _refused(server, spec, arguments)
        raise fail(
            call_args.terminal_message(text, tool, set(server.tools)),
            code=call_args.EXIT_USAGE if refused else call_args.EXIT_TOOL_ERROR,
        )
    data = result.structured_content or {}
    if as_json:
        print_json(data)
    else:
        render.result(out, tool, data)
    if tool == "launch_serve":
        err.print(ONE_SHOT_ENGINE, soft_wrap=True, highlight=False)
    raise typer.Exit(call_args.exit_code(data))


def _refused(server, spec, arguments: dict) -> bool:
    """Whether the call failed on its arguments alone (schema or expect), before anything ran:
    the same checks the server makes first, repeated here to tell a usage error from a tool error."""
    from ...tools.base import AgentError
    from ...tools.common.expect import check
    from ..app import _pre_parse

    try:
        inp = spec.input_model.model_validate(_pre_parse(spec, arguments))
        check(inp.expect, spec.catalogue, has_baseline=inp.has_baseline())
    except (ValueError, AgentError):  # pydantic's ValidationError and ExpectError are ValueErrors
        return True
    return False


# `call` builds a server for one tool call and closes it on exit, stopping every engine it started.
ONE_SHOT_ENGINE = (
    "note: the engine lived only as long as this command and was stopped when it "
    "exited, so its handle is gone. To keep one running, start the server "
    "(infra-agent serve --http) and call launch_serve, serve_benchmark and "
    "stop_serve from one MCP client, or use infra-agent agent; or start and "
    "benchmark it in one call: infra-agent call serve_benchmark engine=builtin ..."
)


async def _call(server, tool: str, arguments: dict):
    from mcp import Client

    try:
        async with Client(server) as client:
            return await client.call_tool(tool, arguments, progress_callback=_progress)
    finally:
        await server.aclose()


async def _progress(progress: float, total: float | None, message: str | None) -> None:
    """A long call's progress, on stderr as it comes (stdout keeps the answer alone)."""
    if message:
        where = f"[{progress:g}/{total:g}] " if total else ""
        print(f"{where}{message}", file=sys.stderr, flush=True)


def open_engine(
    engine: Annotated[str, typer.Argument(help="builtin, transformers, vllm, sglang or command.")],
    args: Annotated[
        Optional[list[str]],
        typer.Argument(help="launch_serve's engine args as key=value pairs or one JSON object."),
    ] = None,
    port: Annotated[int, typer.Option(help="TCP port on 127.0.0.1; 0: a free one.")] = 0,
    token: Annotated[
        Optional[str], typer.Option(help="Require `Authorization: Bearer TOKEN`.")
    ] = None,
    workspace: WorkspaceOpt = None,
    allow_unsandboxed: AllowUnsandboxedOpt = False,
) -> None:
    """Start an engine (launch_serve with expose) and keep it open on 127.0.0.1 for your own
    clients (curl, vllm bench serve, guidellm) until Ctrl-C or SIGTERM; it prints the URL first."""
    try:
        engine_args = call_args.parse_arguments(args or [])
    except ValueError as exc:
        raise fail(str(exc)) from None
    server = build(workspace, allow_unsandboxed)
    expose = {"port": port} | ({"token": token} if token else {})
    arguments = {"engine": engine, "args": engine_args, "expose": expose}
    try:
        anyio.run(_hold_open, server, arguments)
    except KeyboardInterrupt:
        pass


async def _hold_open(server, arguments: dict) -> None:
    from mcp import Client

    try:
        async with Client(server) as client:
            result = await client.call_tool("launch_serve", arguments)
            if result.is_error:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                raise fail(text, code=call_args.EXIT_TOOL_ERROR)
            data = result.structured_content or {}
            print(data["url"], flush=True)  # stdout: the URL alone, for scripts
            err.print(
                f"{data['summary']}; Ctrl-C or SIGTERM stops it", soft_wrap=True, highlight=False
            )
            # SIGTERM (a process manager, `kill`, `docker stop`) stops it as Ctrl-C does: the
            # engine stopped and its folder removed, not left for the next server to sweep
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    err.print("SIGTERM: stopping the engine", highlight=False)
                    return
    finally:
        with anyio.CancelScope(shield=True):
            await server.aclose()

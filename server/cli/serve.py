"""`infra-agent serve` (the MCP server) and `infra-agent engine` (the built-in serving engine)."""

from __future__ import annotations

from typing import Annotated, Optional

import anyio
import typer
from rich.markup import escape

from ..stdio import SHUTDOWN_GRACE_S
from .common import AllowUnsandboxedOpt, WorkspaceOpt, build, err, fail, warn_tools_not_loaded


def serve(
    workspace: WorkspaceOpt = None,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[
        str, typer.Option(help="HTTP bind address (loopback keeps DNS-rebinding protection on).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8765,
    token: Annotated[
        Optional[str],
        typer.Option(
            envvar="INFRA_AGENT_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' on HTTP requests.",
        ),
    ] = None,
    allow_unsandboxed: AllowUnsandboxedOpt = False,
    shutdown_grace: Annotated[
        float,
        typer.Option(
            "--shutdown-grace",
            min=0,
            max=600,
            help="Seconds running calls may finish after SIGTERM before they are cancelled (marked interrupted).",
        ),
    ] = SHUTDOWN_GRACE_S,
    engine_python: Annotated[
        Optional[list[str]],
        typer.Option(
            "--engine-python",
            metavar="ENGINE=PATH",
            help="ENGINE=PATH: the Python an engine with its own install runs on, e.g. "
            "vllm=/opt/vllm/bin/python (over infra-agent.toml's \\[engines.vllm] python; default: "
            "the interpreter of `vllm` on PATH). Repeatable.",
        ),
    ] = None,
    cluster: Annotated[
        Optional[str],
        typer.Option(
            "--cluster",
            metavar="auto|HOST:PORT",
            help="Run jobs on a Ray cluster: 'auto' joins the one `ray start --head` made on this "
            "host, HOST:PORT another head (over infra-agent.toml's \\[cluster] address). Compile, "
            "run and timing jobs go to its nodes, and so does an engine launched with resources= "
            "(with its load generator); profile jobs and engines launched without resources= "
            "stay on this host; see docs/cluster.md.",
        ),
    ] = None,
    eval_submit: Annotated[
        bool,
        typer.Option(
            "--eval-submit",
            help="Also offer submit_diagnosis, the eval's answer form: for a workspace "
            "`infra-agent eval prepare` wrote (`infra-agent eval grade` grades the session).",
        ),
    ] = False,
) -> None:
    """Run the MCP server (stdio by default, for IDEs; --http for streamable HTTP)."""
    server = build(workspace, allow_unsandboxed, engine_python, cluster)
    warn_tools_not_loaded(server)
    if eval_submit:
        from ..eval.submit import offer_submit_tool

        offer_submit_tool(server)
    _remove_stale_cgroups()
    if http:
        from ...serving.tcp import listen_socket
        from ..http import serve_http

        try:
            sock = listen_socket(host, port)
        except OSError as exc:
            raise fail(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port"
            ) from None
        anyio.run(serve_http, server, sock, token, shutdown_grace)
    else:
        from ..stdio import serve_stdio

        anyio.run(serve_stdio, server, shutdown_grace)


def _remove_stale_cgroups() -> None:
    """Servers killed without a shutdown leave cgroup folders: remove them before serving."""
    try:
        from ...sandbox import remove_stale_cgroups
    except ImportError:
        return
    try:
        removed = remove_stale_cgroups()
    except OSError as exc:  # cgroups are a sandbox layer; device_info reports their absence
        err.print(
            f"[yellow]warning:[/] could not clean stale cgroups: {escape(str(exc))}", soft_wrap=True
        )
        return
    if removed:
        err.print(
            f"removed {len(removed)} cgroup folder(s) left by servers that are gone",
            highlight=False,
        )


# `engine` hands its whole command line to the engine's own parser, --help included.
ENGINE_CONTEXT_SETTINGS = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "help_option_names": [],
}


def engine(ctx: typer.Context) -> None:
    """The built-in serving engine (OpenAI API): infra-agent engine [--checkpoint DIR] [--host H --port P] [...]."""
    from ...serving.engine.__main__ import (
        main as engine_main,
    )  # torch: imported only for this command

    raise typer.Exit(engine_main(ctx.args))

"""What every `infra-agent` command shares: the consoles, the --workspace option, building
the server from command-line options, and the error and JSON output helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

out = Console()
err = Console(stderr=True)

WorkspaceOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--workspace",
        "-w",
        help="Workspace folder (kernel specs + infra-agent.toml); default: the built-in zoo.",
    ),
]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the structured result as JSON.")]

AllowUnsandboxedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unsandboxed",
        help="Run agent code even when no isolation (bwrap) is available: then it runs as this "
        "user with this user's rights. Without this flag such a server refuses to run agent code; "
        "device_info says which isolation is in force.",
    ),
]


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `message` as an error on stderr; return the Exit to raise (code 2: usage error)."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def print_json(data: Any) -> None:
    """Plain JSON on stdout, for pipes and other programs (no colour, no wrapping)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def build(
    workspace: Path | None,
    allow_unsandboxed: bool = False,
    engine_python: list[str] | None = None,
    cluster: str | None = None,
):
    """The MCP server for these command-line options; a bad option or workspace exits 2."""
    from ...kernels.workspace import WorkspaceError
    from ..app import build_server

    pythons = {}
    for item in engine_python or ():
        engine, sep, path = item.partition("=")
        if not (sep and engine and path):
            raise fail(
                f"--engine-python {item!r}: give ENGINE=PATH, e.g. vllm=/opt/vllm/bin/python"
            )
        pythons[engine] = str(Path(path).expanduser().resolve())
    try:
        return build_server(
            workspace, allow_unsandboxed=allow_unsandboxed, engine_pythons=pythons, cluster=cluster
        )
    except WorkspaceError as exc:
        raise fail(str(exc)) from None


def warn_tools_not_loaded(server) -> None:
    """Say on stderr (stdout may be the protocol) which tools this install serves without."""
    for module, why in server.state.tools_not_loaded.items():
        err.print(
            f"[yellow]warning:[/] tool module infra_agent.tools.{module} failed to import, so this "
            f"server runs without it: {escape(why)}. Reinstall infra-agent or fix what the error "
            "names; device_info lists it under tools_not_loaded.",
            soft_wrap=True,
            highlight=False,
        )


def no_such_tool(server, tool: str) -> typer.Exit:
    return fail(
        f"no tool {tool!r}; `infra-agent tools` lists them ({', '.join(sorted(server.tools))})"
    )

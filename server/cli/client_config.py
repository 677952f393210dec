"""Commands that set up other programs to use these tools: `config` (an MCP client's
snippet) and `export-tools` (OpenAI function-calling definitions)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated, Optional

import anyio
import typer

from .. import clients
from .common import WorkspaceOpt, build, fail


class ClientName(str, Enum):
    claude_code = "claude-code"
    cursor = "cursor"
    vscode = "vscode"


class ExportFormat(str, Enum):
    openai = "openai"


def config(
    client: Annotated[ClientName, typer.Option("--client", help="Which MCP client to configure.")],
    workspace: WorkspaceOpt = None,
    url: Annotated[
        Optional[str], typer.Option(help="Configure an HTTP server at this URL instead of stdio.")
    ] = None,
    token: Annotated[
        Optional[str], typer.Option(envvar="INFRA_AGENT_TOKEN", help="Bearer token for --url.")
    ] = None,
) -> None:
    """Print the exact client configuration snippet for this install."""
    if workspace is not None and not workspace.is_dir():
        raise fail(f"workspace {str(workspace)!r} does not exist or is not a directory")
    ws = workspace.resolve() if workspace else None
    sys.stdout.write(clients.snippet(client.value, workspace=ws, url=url, token=token) + "\n")


def export_tools(
    format: Annotated[
        ExportFormat, typer.Option("--format", help="Output format.")
    ] = ExportFormat.openai,
    workspace: WorkspaceOpt = None,
) -> None:
    """Print the tools as OpenAI function-calling definitions (JSON)."""
    server = build(workspace)
    tools = anyio.run(server.list_tools)
    sys.stdout.write(json.dumps(clients.openai_tools(tools), indent=2) + "\n")

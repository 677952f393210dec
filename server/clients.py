"""How other programs reach this server: MCP client config snippets, and the tool list
as OpenAI function-calling definitions (for a model such as GLM behind an
OpenAI-compatible API)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

SERVER_NAME = "infra-agent"


def launch_command() -> list[str]:
    """This install's server command: the venv's `infra-agent` script beside the running
    interpreter, else `python -m infra_agent.server` with that interpreter."""
    script = Path(sys.executable).parent / "infra-agent"
    if script.is_file():
        return [str(script), "serve"]
    return [sys.executable, "-m", "infra_agent.server"]


def stdio_entry(workspace: Path | None) -> tuple[str, list[str]]:
    command, *args = launch_command()
    if workspace is not None:
        args += ["--workspace", str(workspace)]
    return command, args


def snippet(
    client: str, *, workspace: Path | None = None, url: str | None = None, token: str | None = None
) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    if client == "claude-code":
        if url:
            entry: dict[str, Any] = {
                "type": "http",
                "url": url,
                **({"headers": headers} if headers else {}),
            }
            header_flag = (
                f" --header {shlex.quote('Authorization: Bearer ' + token)}" if token else ""
            )
            cli = f"claude mcp add --transport http {SERVER_NAME} {shlex.quote(url)}{header_flag}"
        else:
            command, args = stdio_entry(workspace)
            entry = {"type": "stdio", "command": command, "args": args}
            cli = f"claude mcp add {SERVER_NAME} -- {shlex.join([command, *args])}"
        body = json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2)
        return f"# run this once:\n{cli}\n# or put this in .mcp.json at the project root:\n{body}"
    if client == "cursor":
        if url:
            entry = {"url": url, **({"headers": headers} if headers else {})}
        else:
            command, args = stdio_entry(workspace)
            entry = {"command": command, "args": args}
        return "# ~/.cursor/mcp.json (or .cursor/mcp.json in the project):\n" + json.dumps(
            {"mcpServers": {SERVER_NAME: entry}}, indent=2
        )
    if client == "vscode":
        if url:
            entry = {"type": "http", "url": url, **({"headers": headers} if headers else {})}
        else:
            command, args = stdio_entry(workspace)
            entry = {"type": "stdio", "command": command, "args": args}
        return "# .vscode/mcp.json:\n" + json.dumps({"servers": {SERVER_NAME: entry}}, indent=2)
    raise ValueError(f"unknown client {client!r}; use claude-code, cursor or vscode")


def inline_refs(schema: dict) -> dict:
    """Replace local `{"$ref": "#/$defs/X"}` with the definition itself and drop `$defs`:
    some OpenAI-compatible servers do not resolve references. (Our input models are not
    recursive, so inlining terminates.)"""
    defs = schema.get("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = walk(defs[ref.removeprefix("#/$defs/")])
                return {**target, **{k: walk(v) for k, v in node.items() if k != "$ref"}}
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def openai_tools(tools: list) -> list[dict]:
    """MCP tools (mcp_types.Tool) -> [{"type": "function", "function": {...}}]."""
    defs = []
    for tool in tools:
        parameters = inline_refs(dict(tool.input_schema))
        parameters.setdefault("type", "object")
        parameters.setdefault("properties", {})
        parameters.pop("title", None)
        defs.append(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or tool.title or tool.name,
                    "parameters": parameters,
                },
            }
        )
    return defs

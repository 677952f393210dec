"""What server/app.py relies on in the MCP SDK (mcp 2.x), pinned on a bare MCPServer subclass,
so an SDK upgrade that changes it fails here rather than in a tool's behaviour:

- tools/list is answered by `MCPServer.list_tools()`, tools/call by `MCPServer.call_tool(name,
  arguments, context)`: both public and overridable (InfraAgentServer serves its tools there);
- `call_tool` gets the client's arguments as sent (nothing validated or dropped on the way), and
  a Context whose request carries the call's `_meta` and reports progress to the client;
- a CallToolResult returned from it reaches the client as it is (structured content included);
- a ToolError raised from it becomes an error result with its message, an UnexpectedToolError
  one with only its own (the crash's text stays on the server).
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent
from mcp_types import Tool as MCPTool

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False}
OUTPUT = {"type": "object"}  # the client checks structured content against it


class Probe(MCPServer):
    seen: list[tuple[str, dict, Any]]

    async def list_tools(self) -> list[MCPTool]:
        return [MCPTool(name="probe", description="d", input_schema=SCHEMA, output_schema=OUTPUT)]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        self.seen.append((name, arguments, context))
        if arguments.get("fail") == "tool":
            raise ToolError("Error executing tool probe: what to fix")
        if arguments.get("fail") == "crash":
            raise UnexpectedToolError("Error executing tool probe") from RuntimeError("secret")
        await context.report_progress(1, 2, "half")
        meta = context.request_context.meta or {}
        return CallToolResult(
            content=[TextContent(type="text", text="t")],
            structured_content={"n": arguments.get("n"), "run": meta.get("run")},
        )


@pytest.fixture
async def probe():
    server = Probe(name="probe")
    server.seen = []
    async with Client(server) as client:
        yield server, client


async def test_tools_list_is_list_tools(probe):
    _, client = probe
    (tool,) = (await client.list_tools()).tools
    assert (tool.name, tool.input_schema, tool.output_schema) == ("probe", SCHEMA, OUTPUT)


async def test_tools_call_reaches_call_tool_with_raw_arguments_context_and_meta(probe):
    server, client = probe
    progress: list[str | None] = []

    async def on_progress(done, total, message):
        progress.append(message)

    raw = {"n": "not a number", "extra": [1, {"x": None}]}  # outside SCHEMA: still passed as sent
    result = await client.call_tool("probe", raw, progress_callback=on_progress, meta={"run": "r1"})
    assert not result.is_error and result.structured_content == {"n": "not a number", "run": "r1"}
    assert result.content[0].text == "t"
    ((name, arguments, context),) = server.seen
    assert name == "probe" and arguments == raw and isinstance(context, Context)
    assert progress == ["half"]


async def test_errors_raised_from_call_tool_become_error_results(probe):
    _, client = probe
    told = await client.call_tool("probe", {"fail": "tool"})
    assert told.is_error and told.content[0].text == "Error executing tool probe: what to fix"
    crashed = await client.call_tool("probe", {"fail": "crash"})
    assert crashed.is_error and crashed.content[0].text == "Error executing tool probe"

"""Real transports, real clients: the official Python client over stdio, and over
streamable HTTP the MCP conformance suite and the MCP Inspector CLI (Node 22, installed
by `make node`; those tests skip with the reason when it is missing). One HTTP server
per module serves every HTTP test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import copy_zoo

from infra_agent.kernels.workspace import load_workspace
from infra_agent.serving.lifecycle import free_port

REPO = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO / ".cache" / "node" / "node_modules"
NODE = NODE_MODULES / "node" / "bin" / "node"
CONFORMANCE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
INSPECTOR = NODE_MODULES / "@modelcontextprotocol" / "inspector-cli" / "build" / "index.js"
TOKEN = "test-token-0123456789"
ENTRY_POINT = Path(sys.executable).parent / "infra-agent"  # the test venv's own command

# The scenarios that apply to a server with our feature set (see docs/clients.md, "Protocol conformance").
SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
]


def _node_reason() -> str | None:
    if not NODE.is_file():
        return f"Node 22 not installed at {NODE} (run `make node`)"
    version = subprocess.run(
        [str(NODE), "--version"], capture_output=True, text=True
    ).stdout.strip()
    if not version.startswith("v") or int(version[1:].split(".")[0]) < 22:
        return f"{NODE} is {version}; the conformance suite needs Node >= 22"
    return None


@pytest.fixture(scope="module")
def module_workspace(tmp_path_factory) -> Path:
    return copy_zoo(tmp_path_factory.mktemp("transports"))


def _start_http(workspace: Path, *options: str):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "INFRA_AGENT_TOKEN"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infra_agent.server",
            "--http",
            "--port",
            str(port),
            "--workspace",
            str(workspace),
            *options,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    return proc, f"http://127.0.0.1:{port}/mcp"


def _wait_up(proc, url: str) -> None:
    deadline = time.monotonic() + 120  # generous: CI shares 2 cores with everything else
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError("server did not come up in 120 s")


def _stop(proc) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode()


@pytest.fixture(scope="module")
def http_url(module_workspace):
    """One `infra-agent serve --http` (no token) for every HTTP test of the module."""
    proc, url = _start_http(module_workspace)
    try:
        _wait_up(proc, url)
        yield url
    finally:
        stderr = _stop(proc)
    assert "serving streamable HTTP at" in stderr and "list_kernels" in stderr
    # and how a client starts its own server: this install's entry point, not `python -m`
    assert f"over stdio, with this install's command: {ENTRY_POINT} serve" in stderr


@pytest.mark.anyio
async def test_stdio_client_lists_and_calls_tools(module_workspace):
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "infra_agent.server", "--workspace", str(module_workspace)],
    )
    # errlog explicitly: the SDK's default is whatever sys.stderr was when mcp.client.stdio
    # was first imported, which may have been a CliRunner's stand-in without a fileno.
    async with Client(stdio_client(params, errlog=sys.stderr), read_timeout_seconds=120) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("list_kernels", "describe_kernel"):
            assert tools[name].input_schema["type"] == "object"
            assert tools[name].output_schema["type"] == "object"
        kernels = await client.call_tool("list_kernels", {})
        names = [k["name"] for k in kernels.structured_content["kernels"]]
        assert names == sorted(load_workspace(module_workspace).kernels) and "rmsnorm" in names
        rms = await client.call_tool("describe_kernel", {"kernel": "rmsnorm"})
        assert not rms.is_error and rms.structured_content["name"] == "rmsnorm"
        assert json.loads(rms.content[0].text) == rms.structured_content
        bad = await client.call_tool("describe_kernel", {"kernel": "nope"})
        assert bad.is_error and "unknown kernel 'nope'" in bad.content[0].text
        again = await client.call_tool("list_kernels", {})  # the server survived the bad call
        assert not again.is_error


@pytest.mark.anyio
async def test_bearer_token_is_required_when_set(server):
    from infra_agent.server.http import BearerAuth, build_app

    assert isinstance(build_app(server, "127.0.0.1", TOKEN), BearerAuth)
    assert not isinstance(build_app(server, "127.0.0.1", None), BearerAuth)
    reached = []

    async def app(scope, receive, send):  # stands in for the MCP app behind the middleware
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    transport = httpx.ASGITransport(app=BearerAuth(app, TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        denied = await http.post("/mcp", json={})
        assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Bearer")
        wrong = await http.post("/mcp", json={}, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401 and reached == []
        ok = await http.post("/mcp", json={}, headers={"authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and reached == ["/mcp"]


def test_dns_rebinding_protection_rejects_foreign_host(http_url):
    response = httpx.post(http_url, json={}, headers={"host": "evil.example:80"}, timeout=30)
    assert response.status_code in (403, 421)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario(http_url, scenario):
    if reason := _node_reason():
        pytest.skip(reason)
    if not CONFORMANCE.is_file():
        pytest.skip(
            f"@modelcontextprotocol/conformance not installed at {CONFORMANCE} (run `make node`)"
        )
    run = subprocess.run(
        [str(NODE), str(CONFORMANCE), "server", "--url", http_url, "--scenario", scenario],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 failed" in run.stdout


def _inspector(url: str, *args: str) -> dict:
    # The inspector finds its own package.json relative to the working directory.
    run = subprocess.run(
        [str(NODE), str(INSPECTOR), url, "--transport", "http", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=INSPECTOR.parent,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_inspector_cli_lists_and_calls_tools(http_url):
    if reason := _node_reason():
        pytest.skip(reason)
    if not INSPECTOR.is_file():
        pytest.skip(
            f"@modelcontextprotocol/inspector-cli not installed at {INSPECTOR} (run `make node`)"
        )
    listed = _inspector(http_url, "--method", "tools/list")
    names = {t["name"] for t in listed["tools"]}
    assert {"list_kernels", "describe_kernel", "device_info"} <= names
    assert all("outputSchema" in t and "annotations" in t for t in listed["tools"])
    called = _inspector(
        http_url,
        "--method",
        "tools/call",
        "--tool-name",
        "describe_kernel",
        "--tool-arg",
        "kernel=rmsnorm",
    )
    assert called["structuredContent"]["name"] == "rmsnorm" and not called.get("isError")
    bad = _inspector(
        http_url,
        "--method",
        "tools/call",
        "--tool-name",
        "describe_kernel",
        "--tool-arg",
        "kernel=nope",
    )
    assert bad["isError"] is True and "unknown kernel" in bad["content"][0]["text"]

"""The wheel holds the whole package, and installed from it (not editable) the server serves
every tool over stdio, as an MCP client started from `infra-agent config` runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest
from wheel_install import (  # noqa: F401 (fixtures)
    PACKAGE_FOLDERS,
    ROOT,
    built_wheel,
    installed,
    tracked_files,
    wheel_names,
)

from infra_agent.server.app import discover_tools

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _shipped(path: str) -> bool:
    parts = path.split("/")
    return parts[0] in PACKAGE_FOLDERS and not any(
        p.startswith(".") or p == "__pycache__" for p in parts
    )


def test_the_wheel_holds_every_file_of_the_package_folders(built_wheel):
    """Every file git knows under server/, tools/, kernels/, serving/ and sandbox/ (modules, the
    kernel zoo's specs and sources, templates, READMEs) is in the wheel under infra_agent/, and
    nothing else is: the list comes from git, not from setup.py's own walk."""
    expected = {f"infra_agent/{f}" for f in tracked_files() if _shipped(f)}
    names = wheel_names(built_wheel)
    assert not sorted(expected - names), "missing from the wheel"
    assert {
        "infra_agent/tools/sweep_kernel/__init__.py",
        "infra_agent/tools/sweep_serve/__init__.py",
    } <= names
    assert {
        "infra_agent/kernels/vector_add/spec.py",
        "infra_agent/kernels/infra-agent.toml",
    } <= names
    others = {n for n in names - expected if ".dist-info/" not in n}
    assert not sorted(others), "files the checkout does not ship"


def _stdio_command(installed) -> tuple[str, list[str]]:
    """The server command `infra-agent config` prints for this install (what a person pastes)."""
    done = installed.run("config", "--client", "cursor")
    assert done.returncode == 0, done.stderr
    body = done.stdout.split("\n", 1)[1]  # past the "# ~/.cursor/mcp.json" line
    entry = json.loads(body)["mcpServers"]["infra-agent"]
    return entry["command"], entry["args"]


def test_the_installed_command_says_its_version_and_runs_from_the_wheel(installed):
    done = installed.run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"infra-agent {VERSION}", done
    where = subprocess.run(
        [
            str(installed.venv / "bin" / "python"),
            "-c",
            "import infra_agent.tools as t; print(t.__path__[0])",
        ],
        capture_output=True,
        text=True,
        env=installed.env,
        cwd=installed.venv,
    )
    assert where.stdout.strip().startswith(str(installed.venv)), where  # not this checkout
    command, args = _stdio_command(installed)
    assert (command, args) == (str(installed.entry_point), ["serve"])


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_installed_server_serves_every_tool_over_stdio(installed):
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command, args = _stdio_command(installed)
    params = StdioServerParameters(
        command=command, args=args, env=installed.env, cwd=str(installed.venv)
    )
    async with Client(stdio_client(params, errlog=sys.stderr), read_timeout_seconds=300) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == set(discover_tools())  # the checkout's tools/, every one
        assert {"sweep_kernel", "sweep_serve"} <= listed
        kernels = await client.call_tool("list_kernels", {})
        names = {k["name"] for k in kernels.structured_content["kernels"]}
        assert names == {p.parent.name for p in (ROOT / "kernels").glob("*/spec.py")}
        described = await client.call_tool("describe_kernel", {"kernel": "vector_add"})
        assert not described.is_error and described.structured_content["name"] == "vector_add"
        info = await client.call_tool("device_info", {})
        assert info.structured_content["tools_not_loaded"] == []
        # the kernel folders are data the sandbox's worker loads by path, from site-packages
        checked = await client.call_tool(
            "check_numerics",
            {"kernel": "vector_add", "shapes": [{"N": 1000}], "dtypes": ["float32"], "trials": 1},
        )
        assert not checked.is_error, checked.content
        assert checked.structured_content["verdict"] == "pass"

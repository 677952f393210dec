"""Every tool module in tools/ loads; a server missing one says so where a person and an agent
look: at startup on stderr, in `infra-agent tools`, and in device_info's `tools_not_loaded`."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import call
from typer.testing import CliRunner

import infra_agent.tools as tools_package
from infra_agent.server.app import TOOL_IMPORT_ERRORS, build_server, discover_tools
from infra_agent.server.cli import app as cli_app
from infra_agent.tools.base import Tool

TOOLS_DIR = Path(tools_package.__path__[0])
NOT_TOOLS = {"base", "common"}  # shared code, not tools
BROKEN = "zz_broken_tool"
MISSING = "a_module_no_install_has"
# A tools folder holding one module that fails to import, put on infra_agent.tools' path.
PLANT = """
import sys
import infra_agent.tools as tools
tools.__path__.append({folder!r})
from infra_agent.server.cli import main
main(sys.argv[1:])
"""


def _tool_modules() -> list[str]:
    """The tool modules as the folder holds them: X.py, or a package X/ with an __init__.py."""
    names = [
        p.stem if p.suffix == ".py" else p.name
        for p in TOOLS_DIR.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").is_file()) and not p.name.startswith("_")
    ]
    return sorted(set(names) - NOT_TOOLS)


def test_every_module_in_tools_loads_and_is_a_tool():
    modules = _tool_modules()
    assert len(modules) >= 15
    for name in modules:
        module = importlib.import_module(f"infra_agent.tools.{name}")
        assert isinstance(getattr(module, "TOOL", None), Tool), f"tools/{name} defines no TOOL"
    found = discover_tools()
    assert TOOL_IMPORT_ERRORS == {} and len(found) == len(modules)


@pytest.fixture
def broken_tool(tmp_path, monkeypatch) -> Path:
    """A tool module that fails to import, on infra_agent.tools' path for this test."""
    folder = tmp_path / "more_tools"
    folder.mkdir()
    (folder / f"{BROKEN}.py").write_text(f"import {MISSING}\n")
    monkeypatch.setattr(tools_package, "__path__", [*tools_package.__path__, str(folder)])
    yield folder
    sys.modules.pop(f"infra_agent.tools.{BROKEN}", None)


@pytest.mark.anyio
async def test_device_info_names_a_tool_that_did_not_load(broken_tool, workspace):
    from mcp import Client

    server = build_server(workspace)
    try:
        assert BROKEN not in server.tools and "device_info" in server.tools
        async with Client(server) as client:
            out = await call(client, "device_info")
    finally:
        await server.aclose()
    error = f"ModuleNotFoundError: No module named '{MISSING}'"
    assert out["tools_not_loaded"] == [{"module": BROKEN, "error": error}]
    assert f"1 tool(s) failed to load: {BROKEN}" in out["summary"]


def test_infra_agent_tools_warns_of_a_tool_that_did_not_load(broken_tool, workspace):
    done = CliRunner(env={"COLUMNS": "200"}).invoke(cli_app, ["tools", "-w", str(workspace)])
    assert done.exit_code == 0 and "list_kernels" in done.stdout
    assert BROKEN not in done.stdout
    assert f"infra_agent.tools.{BROKEN} failed to import" in done.stderr
    assert MISSING in done.stderr


def test_serve_says_at_startup_which_tool_did_not_load(tmp_path, workspace):
    """The stdio server, stdin closed at once: it starts, warns on stderr, and stops."""
    folder = tmp_path / "more_tools"
    folder.mkdir()
    (folder / f"{BROKEN}.py").write_text(f"import {MISSING}\n")
    done = subprocess.run(
        [sys.executable, "-c", PLANT.format(folder=str(folder)), "serve", "-w", str(workspace)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout == ""  # stdout is the protocol's
    assert f"infra_agent.tools.{BROKEN} failed to import" in done.stderr, done.stderr
    assert MISSING in done.stderr

"""Shared fixtures: a throwaway workspace, a server on it, an in-memory MCP client.

    @pytest.mark.anyio
    async def test_something(client):
        out = await call(client, "describe_kernel", kernel="rmsnorm")

`call` returns the tool's structured output, or raises ToolCallError with the text the
agent would see.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from infra_agent.kernels.workspace import EMBEDDED_ROOT

# Hugging Face libraries never reach a hub from a test: tests build their own tiny models.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(items):
    """A test that starts vLLM (the vllm_client fixture) is `serial`: vLLM's engine takes both
    cores for a minute to start and its tests measure it, so `make test` runs them alone, after
    the xdist workers (pyproject.toml's markers)."""
    for item in items:
        if "vllm_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.serial)


class ToolCallError(Exception):
    """The tool answered with is_error=True; the message is the text the agent saw."""


@pytest.fixture(scope="session")
def anyio_backend():
    return "asyncio"  # session-wide, so module-scoped async fixtures (zoo_client) can use it


OTHER_DEVICE = "ffff0000ffff0000"  # a device fingerprint no host of the tests has


def record_on_node(workspace: Path, experiment_id: str, fingerprint: str = OTHER_DEVICE) -> None:
    """Rewrite an experiment's ledger `nodes` as the Ray executor records a call whose work ran
    on one cluster node with the device `fingerprint`: this host has one kind of device, so the
    tests of what differs by device move a recorded call to another one."""
    node = {
        "node_id": "ab" * 28,
        "address": "10.0.0.2",
        "hostname": "node-b",
        "device_fingerprint": fingerprint,
        "jobs": 1,
    }
    with sqlite3.connect(workspace / ".infra-agent" / "ledger.sqlite") as db:
        db.execute("UPDATE experiments SET nodes=? WHERE id=?", (json.dumps([node]), experiment_id))


def copy_zoo(parent: Path) -> Path:
    """A copy of the embedded kernel zoo at parent/ws, so ledger and artifacts land there."""
    root = parent / "ws"
    shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_zoo(tmp_path)


@pytest.fixture
async def server(workspace: Path):
    from infra_agent.server.app import build_server

    srv = build_server(workspace)
    yield srv
    await srv.aclose()


@pytest.fixture(scope="module")
def zoo_workspace(tmp_path_factory) -> Path:
    """The test module's own copy of the zoo (zoo_client's workspace)."""
    return copy_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="module")
async def zoo_client(zoo_workspace: Path):
    """One server per test module on its own copy of the zoo, as one agent session holds it: the
    module's calls share its warm sandbox and its experiment ledger (a later call can name an
    earlier one as its baseline); a zygote per test would cost seconds each."""
    from mcp import Client

    from infra_agent.server.app import build_server

    srv = build_server(zoo_workspace)
    async with Client(srv) as c:
        yield c
    await srv.aclose()


@pytest.fixture
async def client(server):
    from mcp import Client

    async with Client(server) as c:
        yield c


async def call(client, tool: str, /, **args) -> dict:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise ToolCallError(" ".join(getattr(c, "text", str(c)) for c in result.content))
    assert result.structured_content is not None, f"{tool} returned no structured content"
    return result.structured_content


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A tiny Llama checkpoint (2 layers, hidden 64, a trained byte-level BPE tokenizer), built once
    per session with serving/engine/tiny_checkpoint.py: nothing is downloaded."""
    from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

    folder = tmp_path_factory.mktemp("tiny-llama")
    build_tiny_checkpoint(folder)
    return folder


def in_forked_child(fn, *args):
    """fn(*args) in a child process (a fresh interpreter), its (picklable) result returned here. For tests that
    run interpreted Triton in-process (the built-in engine's kernels): interpreter mode is
    process-wide in Triton and would leak into later in-process AOT compiles."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(
        1
    ) as pool:  # a fresh interpreter: fork would inherit torch threads
        return pool.apply(fn, args)


def processes_working_in(folder_name: str, comm: str | None = None) -> list[int]:
    """Host pids of the processes working in a sandboxed engine's folder (their cwd, as the
    sandbox shows it, ends with its name), optionally only those named `comm`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cwd = os.readlink(proc / "cwd")
            name = (proc / "comm").read_text().strip()
        except (OSError, ValueError):
            continue
        if cwd.endswith("/" + folder_name) and (comm is None or name == comm):
            found.append(int(proc.name))
    return found


def process_cpu_s(pid: int) -> float:
    """utime + stime of `pid` from /proc/<pid>/stat (the kernel's per-process count, in clock
    ticks), s."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_gone(pid: int, within_s: float) -> bool:
    """Whether `pid` is dead (or a zombie) now, or becomes so within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True  # dead (its parent has not reaped it yet)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)

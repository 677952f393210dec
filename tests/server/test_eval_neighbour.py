"""Issue 38: the starved-client task's plant, with real processes. The busy neighbour pins
every load generator its parent starts onto its own CPU (as the kernel reports the generator's
allowed CPUs and niceness, read from /proc), stays busy there, and ends with the task; a host
it cannot be planted on, and an MCP session that cannot hold it, are told so up front."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest
from conftest import process_cpu_s, process_gone
from typer.testing import CliRunner

from infra_agent.server.cli import app
from infra_agent.server.eval.neighbour import BusyNeighbour, NeighbourError
from infra_agent.serving.loadgen.process import LoadProcess

pytestmark = pytest.mark.anyio


def allowed_cpus(pid: int) -> str:
    """The CPUs the kernel lets `pid` run on, as /proc/PID/status lists them ('1', '0-1')."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next(
        line.split(":", 1)[1].strip()
        for line in status.splitlines()
        if line.startswith("Cpus_allowed_list")
    )


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the neighbour needs 2 CPUs")
async def test_the_neighbour_pins_the_load_generators_beside_it_and_ends_with_the_task():
    ours = allowed_cpus(os.getpid())
    async with BusyNeighbour(nice=3) as neighbour:
        assert neighbour.pid is not None
        generator = await LoadProcess.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and allowed_cpus(generator.pid) != str(neighbour.cpu):
                await anyio.sleep(0.05)
            assert allowed_cpus(generator.pid) == str(neighbour.cpu)
            assert os.getpriority(os.PRIO_PROCESS, generator.pid) == 3
            assert allowed_cpus(neighbour.pid) == str(neighbour.cpu)
            # busy: it burns its CPU whether or not anything else runs there
            before, start = process_cpu_s(neighbour.pid), time.monotonic()
            await anyio.sleep(1.0)
            assert process_cpu_s(neighbour.pid) - before > 0.2 * (time.monotonic() - start)
        finally:
            await generator.aclose()
        # this process and its other children (the engines, in a task) are left where they were
        assert allowed_cpus(os.getpid()) == ours
    assert process_gone(neighbour.pid, within_s=10)
    planted = neighbour.planted()
    assert planted.pinned == 1 and planted.cpu == neighbour.cpu
    assert f"CPU {neighbour.cpu} starved 1 load-generator" in planted.describe()


def test_a_host_with_one_cpu_is_told_the_neighbour_needs_two():
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # this thread only
    try:
        with pytest.raises(NeighbourError, match="needs 2 CPUs or more"):
            BusyNeighbour()
    finally:
        os.sched_setaffinity(0, allowed)


def test_an_mcp_session_cannot_hold_the_neighbour_and_is_told_to_use_the_runner(tmp_path):
    result = CliRunner().invoke(
        app,
        ["eval", "prepare", str(tmp_path / "s"), "--task", "serving.starved_client", "--seed", "0"],
    )
    assert result.exit_code == 2, result.output
    assert "only the runner can hold" in " ".join(result.output.split())
    assert "infra-agent eval --tasks serving.starved_client" in " ".join(result.output.split())
    assert not (tmp_path / "s").exists()

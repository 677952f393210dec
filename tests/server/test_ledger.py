"""The experiment ledger under concurrency and after a SIGKILL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import anyio
import pytest
from conftest import call

from infra_agent.server.ledger import Ledger


def _open(ledger: Ledger, tool: str = "t") -> str:
    return ledger.open(
        tool=tool,
        arguments={"x": 1},
        kernel="k",
        hypothesis=None,
        git_commit=None,
        git_diff_sha256=None,
        device={"cpu": "x"},
        device_fingerprint="f",
    )


def test_ids_are_short_sortable_and_rows_round_trip(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ids = [_open(ledger) for _ in range(3)]
    assert ids == sorted(ids) and all(len(i) == len("e00001-abcd") for i in ids)
    ledger.close_ok(ids[0], {"speedup": 1.5}, ["artifact://x/y"])
    ledger.close_error(ids[1], "bad source", [])
    row = ledger.get(ids[0])
    assert (
        row["status"] == "ok"
        and row["result"] == {"speedup": 1.5}
        and row["artifacts"] == ["artifact://x/y"]
    )
    assert ledger.get(ids[1])["error"] == "bad source"
    assert [r["id"] for r in ledger.query(limit=2)] == [ids[2], ids[1]]
    assert ledger.get("e99999-ffff") is None


def test_concurrent_writers_threads_and_connections(tmp_path):
    path = tmp_path / "ledger.sqlite"
    shared, other = Ledger(path), Ledger(path)  # `other` stands for a second process
    errors: list[BaseException] = []

    def writer(ledger: Ledger, n: int) -> None:
        try:
            for _ in range(n):
                eid = _open(ledger)
                ledger.close_ok(eid, {"v": 1}, [])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(shared if i % 2 else other, 40)) for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = shared.query(limit=1000)
    assert len(rows) == 240 and len({r["id"] for r in rows}) == 240
    assert all(r["status"] == "ok" for r in rows)
    assert shared.integrity_ok()


@pytest.mark.anyio
async def test_concurrent_tool_calls_each_get_one_row(client, server):
    results = []

    async def one(i: int) -> None:
        results.append(
            await call(
                client,
                "describe_kernel",
                kernel="rmsnorm",
                include_source=False,
                hypothesis=f"call {i}",
            )
        )

    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(one, i)
    ids = {r["experiment_id"] for r in results}
    assert len(ids) == 12
    rows = server.state.ledger.query(tool="describe_kernel", limit=100)
    assert {r["id"] for r in rows} == ids and all(r["status"] == "ok" for r in rows)


WRITER = textwrap.dedent("""
    import sys
    from infra_agent.server.ledger import Ledger
    ledger = Ledger(sys.argv[1])
    print("ready", flush=True)
    while True:
        eid = ledger.open(tool="loop", arguments={"pad": "x" * 2000}, kernel=None, hypothesis=None,
                          git_commit=None, git_diff_sha256=None, device=None, device_fingerprint=None)
        ledger.close_ok(eid, {"pad": "y" * 4000}, [])
""")


def test_sigkilled_writer_leaves_a_consistent_ledger(tmp_path):
    path = tmp_path / "ledger.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
        ):  # let it write a few hundred rows, then kill it mid-stream
            with sqlite3.connect(path, timeout=10) as probe:
                if probe.execute("SELECT count(*) FROM experiments").fetchone()[0] >= 200:
                    break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    ledger = Ledger(path)  # reopening recovers the WAL and closes rows the dead writer left open
    assert ledger.integrity_ok()
    rows = ledger.query(limit=100000)
    assert len(rows) >= 200
    statuses = {r["status"] for r in rows}
    assert statuses <= {"ok", "interrupted"}
    assert all(r["result"]["pad"] == "y" * 4000 for r in rows if r["status"] == "ok")
    assert all(r["id"] for r in rows)  # open() writes the id in the same transaction as the row


def test_rows_left_running_by_a_dead_process_become_interrupted(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    mine, orphan = _open(ledger), _open(ledger)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    with sqlite3.connect(path) as db:
        db.execute("UPDATE experiments SET pid=? WHERE id=?", (int(dead.stdout), orphan))
    reopened = Ledger(path)
    assert reopened.get(orphan)["status"] == "interrupted"
    assert (
        reopened.get(mine)["status"] == "running"
    )  # this process is alive: its call may still finish


SERVER_MID_CALL = textwrap.dedent("""
    import sys, time, anyio
    from mcp import Client
    from infra_agent.server import app
    from infra_agent.tools.base import Tool, ToolInput, ToolOutput

    async def slow(inp, ctx):
        print("in-call", ctx.experiment_id, flush=True)
        time.sleep(600)  # killed long before this returns

    SLOW = Tool(name="slow", title="Slow", description="sleeps", input_model=ToolInput,
                output_model=ToolOutput, run=slow)
    found = app.discover_tools()
    app.discover_tools = lambda: {**found, "slow": SLOW}

    async def main():
        server = app.build_server(sys.argv[1])
        async with Client(server) as client:
            done = await client.call_tool("list_kernels", {})
            print("done", done.structured_content["experiment_id"], flush=True)
            await client.call_tool("slow", {"hypothesis": "the ledger survives a kill"})

    anyio.run(main)
""")


def test_server_killed_mid_call_leaves_the_call_interrupted(workspace):
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER_MID_CALL, str(workspace)], stdout=subprocess.PIPE, text=True
    )
    try:
        finished = proc.stdout.readline().split()
        running = proc.stdout.readline().split()
        assert finished[0] == "done" and running[0] == "in-call", (finished, running)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    ledger = Ledger(workspace / ".infra-agent" / "ledger.sqlite")
    assert ledger.integrity_ok()
    assert ledger.get(finished[1])["status"] == "ok"
    killed = ledger.get(running[1])
    assert (
        killed["status"] == "interrupted" and killed["hypothesis"] == "the ledger survives a kill"
    )
    assert "stopped before this call finished" in killed["error"]

"""A real server process: stdio lines its parser rejects are answered (raw bytes), and
SIGTERM on stdio and on HTTP gives running calls a grace period, then cancels them,
marks their rows interrupted and leaves no cgroup folder behind (issue 10, defects 6, 7).

Each test starts one server (a few seconds) and, for SIGTERM, one runaway sandbox job.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stdio_server import StdioServer

from infra_agent.sandbox.cgroups import _PREFIX, CgroupManager

RUNAWAY = {
    "kernel": "vector_add",
    "shapes": [{"N": 1024}],
    "budget_ms": 100,
    "source": "def f(x, y):\n    while True:\n        pass\n",
    "entry": "f",
}
DEEP = "[" * 200 + "]" * 200
HUGE_INT = "9" * 5000


def _call_line(rid: int, arguments_json: str, tool: str = "list_kernels") -> bytes:
    return (
        f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call",'
        f'"params":{{"name":"{tool}","arguments":{arguments_json}}}}}'
    ).encode()


def test_stdio_answers_rejected_lines_and_sigterm_interrupts_the_running_call(workspace):
    """One server for both (a server start costs seconds): the raw lines first, then SIGTERM."""
    stale = _plant_stale_cgroup_folders()
    server = StdioServer(workspace, "--shutdown-grace", "1")
    try:
        server.initialize()
        assert not any(p.exists() for p in stale), (
            "a dead server's cgroup folders survived the start-up"
        )
        for rid, line in [
            (11, _call_line(11, '{"hypothesis":"\\ud800"}')),  # a lone surrogate, escaped
            (12, _call_line(12, '{"hypothesis":' + DEEP + "}")),
            (13, _call_line(13, '{"limit":' + HUGE_INT + "}", "list_experiments")),
        ]:
            server.send(line)
            answer = server.reply(rid)
            assert answer["error"]["code"] == -32700 and answer["error"]["data"], answer
        server.send(b"this is not json")
        assert server.reply(None)["error"]["code"] == -32700
        server.send(b'{"neither": "a request"}')
        assert server.reply(None)["error"]["code"] == -32600
        # raw surrogate bytes (not valid UTF-8): the transport decodes them as U+FFFD, a valid call
        line = _call_line(14, '{"hypothesis":"SURROGATE"}').replace(b"SURROGATE", b"\xed\xa0\x80")
        server.send(line)
        assert "result" in server.reply(14)
        # JSON's Infinity: refused as a tool error, never a PASS against an infinite tolerance
        server.send(_call_line(15, '{"kernel":"rmsnorm","tolerance":Infinity}', "check_numerics"))
        answer = server.reply(15)
        assert "error" in answer or answer["result"]["isError"], answer
        server.call(16, "list_kernels", {})  # and the server still answers
        assert server.reply(16)["result"]["structuredContent"]["kernels"]

        server.call(21, "microbench", RUNAWAY)
        _wait_running(workspace, "microbench")
        _assert_stopped_cleanly(server.proc, workspace)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def _state_ledger(workspace: Path) -> Path:
    return workspace / ".infra-agent" / "ledger.sqlite"


def _wait_running(workspace: Path, tool: str, timeout_s: float = 120) -> None:
    """Until a `tool` call is running and its sandbox job has a folder (the job started)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = workspace / ".infra-agent" / "jobs"
        if _state_ledger(workspace).exists() and jobs.is_dir() and any(jobs.iterdir()):
            with sqlite3.connect(_state_ledger(workspace)) as db:
                if db.execute(
                    "SELECT 1 FROM experiments WHERE tool=? AND status='running'", (tool,)
                ).fetchall():
                    return
        time.sleep(0.2)
    raise AssertionError(f"no running {tool} call with a job in {timeout_s} s")


def _statuses(workspace: Path, tool: str) -> list[tuple[str, str]]:
    with sqlite3.connect(_state_ledger(workspace)) as db:
        return db.execute("SELECT status, error FROM experiments WHERE tool=?", (tool,)).fetchall()


def _cgroup_folders_of(pid: int) -> list[Path]:
    bases = CgroupManager().bases.values()  # this process's cgroups; the server's sit beside them
    return [p for b in bases for p in b.parent.glob(f"{_PREFIX}{pid}-*")] + [
        p for b in bases for p in b.parent.glob(f"{_PREFIX}server-{pid}")
    ]


def _plant_stale_cgroup_folders() -> list[Path]:
    """Folders as a SIGKILLed server leaves them: named after a pid that no longer exists."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    planted = []
    for base in CgroupManager().bases.values():
        folder = base.parent / f"{_PREFIX}{gone.pid}-1"
        (folder / "job-x").mkdir(parents=True, exist_ok=True)
        planted.append(folder)
    return planted


def _assert_stopped_cleanly(proc: subprocess.Popen, workspace: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)  # the runaway alone would hold the call for 100+ s
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the server did not stop within 60 s of SIGTERM") from None
    statuses = _statuses(workspace, "microbench")
    assert statuses and all(s == "interrupted" for s, _ in statuses), statuses
    assert "shut down" in statuses[0][1]
    assert _cgroup_folders_of(proc.pid) == []


@pytest.mark.anyio
async def test_http_sigterm_interrupts_the_running_call_and_cleans_up(workspace):
    import anyio
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from test_transports import _wait_up

    from infra_agent.serving.lifecycle import free_port

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
            "--shutdown-grace",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await anyio.to_thread.run_sync(_wait_up, proc, url)

        async def runaway() -> None:
            try:
                async with Client(streamable_http_client(url)) as client:
                    await client.call_tool("microbench", RUNAWAY)
            except Exception:  # noqa: BLE001 - the server goes away mid-call: that is the point
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(runaway)
            await anyio.to_thread.run_sync(_wait_running, workspace, "microbench")
            await anyio.to_thread.run_sync(_assert_stopped_cleanly, proc, workspace)
            tg.cancel_scope.cancel()
    finally:
        if proc.poll() is None:
            proc.kill()

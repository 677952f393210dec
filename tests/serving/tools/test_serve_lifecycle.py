"""Engine lifecycle through the MCP tools with the `command` adapter: a tiny stdlib server the
test writes into the workspace, started inside the sandbox like every engine. Bad starts,
hangs, crashes mid-benchmark, a port the engine may not use: each a clear error with the
log tail, and nothing left running."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import ToolCallError, call

SERVER = r"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, mode = int(sys.argv[1]), sys.argv[2]
if mode == "other-port":
    port += 1  # Landlock allows the engine its own port only
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = b"{}" if self.path == "/health" else json.dumps({"data": [{"id": "echo"}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if mode == "crash":
            os._exit(9)
        if mode == "reject":  # as vLLM answers a prompt longer than its context
            body = json.dumps({"error": {"message": "This model's maximum context length is 8 tokens",
                                         "type": "BadRequestError"}}).encode()
            self.send_response(400); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for t in ("a", "b"):
            self.wfile.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": t}]}).encode() + b"\n\n")
        usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
        self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        self.close_connection = True
print("serving on", port, flush=True)
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture
def echo_workspace(workspace: Path) -> Path:
    (workspace / "echo_server.py").write_text(SERVER)
    return workspace


def command(mode: str) -> dict:
    return {"command": [sys.executable, "/workspace/echo_server.py", "{port}", mode]}


def engine_processes() -> list[int]:
    """Host processes running the echo server with this interpreter (none may outlive its engine; a
    test run from another checkout on the same host has its own)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"echo_server.py" in cmdline and os.fsencode(sys.executable) in cmdline:
                out.append(int(pid))
        except OSError:
            pass
    return out


@pytest.mark.anyio
async def test_command_engine_benchmark_and_stop(client, echo_workspace):
    launched = await call(client, "launch_serve", engine="command", args=command("ok"))
    assert engine_processes()
    out = await call(
        client,
        "serve_benchmark",
        handle=launched["handle"],
        repeats=2,
        workload={"num_requests": 8, "input_len": 4, "output_len": 2, "rate": 50.0},
        criteria=["failed == 0"],
        expect=["completed == 8"],
    )
    assert out["metrics"]["completed"] == 8 and out["criteria"]["answer"] == "supported"
    assert out["hypothesis_answer"]["answer"] == "supported"
    assert (
        out["phases"] == [] and out["metrics"]["prefill_ms"] is None
    )  # no /metrics: nothing to attribute
    await call(client, "stop_serve", handle=launched["handle"])
    assert engine_processes() == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    "mode, args, message",
    [
        (
            "exit",
            {"command": [sys.executable, "-c", "import sys; print('bad flag --x'); sys.exit(3)"]},
            "(?s)exited during start-up \\(code 3\\).*bad flag --x",
        ),
        (
            "hang",
            {"command": [sys.executable, "-c", "import time; print('loading'); time.sleep(600)"]},
            # the kernel's account of its threads (with cgroups): it slept, so not starved
            "(?s)did not answer /health within 3 s \\((its processes ran [0-9.]+ s on a CPU and "
            "waited [0-9.]+ s for one [^;]*; )?raise ready_timeout_s for a large model\\).*loading",
        ),
        ("other-port", None, "(?s)exited during start-up.*(PermissionError|Permission denied)"),
    ],
)
async def test_bad_starts_are_clear_errors(client, echo_workspace, mode, args, message):
    with pytest.raises(ToolCallError, match=message):
        await call(
            client, "launch_serve", engine="command", args=args or command(mode), ready_timeout_s=3
        )
    assert engine_processes() == [] and (await call(client, "list_serves"))["serves"] == []


@pytest.mark.anyio
async def test_crash_mid_benchmark(client, echo_workspace):
    launched = await call(client, "launch_serve", engine="command", args=command("crash"))
    with pytest.raises(ToolCallError, match="(?s)died during the benchmark.*serving on"):
        await call(
            client,
            "serve_benchmark",
            handle=launched["handle"],
            repeats=1,
            workload={"num_requests": 2, "input_len": 2, "output_len": 2},
        )
    await call(client, "stop_serve", handle=launched["handle"])
    assert engine_processes() == []


@pytest.mark.anyio
async def test_bad_arguments(client, echo_workspace):
    with pytest.raises(ToolCallError, match="unknown_metric"):
        await call(
            client,
            "serve_benchmark",
            engine="command",
            args=command("ok"),
            criteria=["unknown_metric < 1"],
        )
    with pytest.raises(ToolCallError, match="baseline"):
        await call(
            client,
            "serve_benchmark",
            engine="command",
            args=command("ok"),
            criteria=["ttft_p50 <= 1.05 * baseline.ttft_p50"],
        )
    with pytest.raises(ToolCallError, match="no serving engine with handle 'serve-nope'"):
        await call(client, "serve_benchmark", handle="serve-nope")
    with pytest.raises(ToolCallError, match="no serving engine with handle 'serve-gone'"):
        await call(
            client,
            "serve_benchmark",
            engine="command",
            args=command("ok"),
            baseline_handle="serve-gone",
        )
    with pytest.raises(ToolCallError, match="not both"):
        await call(
            client,
            "serve_benchmark",
            engine="command",
            args=command("ok"),
            baseline="exp-1",
            baseline_handle="serve-1",
        )
    with pytest.raises(ToolCallError, match="outside the workspace"):
        await call(client, "launch_serve", engine="transformers", args={"model": "/etc"})
    # no interpreter configured and no `vllm` on this PATH: where it looked and what to set
    with pytest.raises(ToolCallError, match=r"no `vllm` on PATH.*\[engines.vllm\] python"):
        await call(client, "launch_serve", engine="vllm", args={"model": "vector_add"})
    # a place on a cluster, on a server that has none: how to start it with one
    with pytest.raises(ToolCallError, match=r"runs on none: start it with --cluster"):
        await call(
            client, "launch_serve", engine="command", args=command("ok"), resources={"GPU": 1}
        )
    assert engine_processes() == []


KILLED_SERVER = r"""
import asyncio, sys
from mcp import Client
from infra_agent.server.app import build_server

async def main():
    server = build_server(sys.argv[1])
    async with Client(server) as client:
        result = await client.call_tool("launch_serve", {"engine": "command", "args": {"command": [
            sys.executable, "/workspace/echo_server.py", "{port}", "ok"]}})
        assert not result.is_error, result.content
        print("launched", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


def test_no_engine_outlives_a_sigkilled_server(echo_workspace, tmp_path):
    """Its engines die with it; what they left on disk (their folders in the workspace, the
    short links to their sockets in the temp folder, named for the dead server's pid) is removed
    when the next server on the workspace first manages engines."""
    import signal
    import subprocess
    import tempfile
    import time

    from infra_agent.sandbox.service import LINK_PREFIX
    from infra_agent.server.app import build_server

    script = tmp_path / "serve_then_wait.py"
    script.write_text(KILLED_SERVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(echo_workspace)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "launched"
        assert engine_processes()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + 10
    while engine_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_processes() == []
    jobs = echo_workspace / ".infra-agent" / "jobs"
    left = [*jobs.glob("engine-*")]
    links = [*Path(tempfile.gettempdir()).glob(f"{LINK_PREFIX}{proc.pid}-*")]
    assert left, "the killed server's engine folder was expected on disk"
    # a socket path past sun_path's limit goes through a link (this test's is)
    assert links or all(len(str(f / "engine.sock")) <= 100 for f in left), left
    engines = build_server(echo_workspace).state.engines  # the next server manages engines
    assert engines.list() == [] and [f for f in left + links if f.exists()] == []


@pytest.mark.anyio
async def test_summaries_name_the_engine_and_a_second_stop_says_so(client, echo_workspace):
    launched = await call(client, "launch_serve", engine="command", args=command("ok"))
    handle = launched["handle"]
    assert launched["summary"].startswith(
        f"command engine {handle} (command {sys.executable} "
        "/workspace/echo_server.py {port} ok) ready in "
    )
    listed = await call(client, "list_serves")
    assert listed["summary"].startswith(f"1 engine(s) running: command engine {handle} (command ")
    first = await call(client, "stop_serve", handle=handle)
    assert first["already_stopped"] is False
    assert first["summary"].startswith(f"stopped command engine {handle}")
    again = await call(client, "stop_serve", handle=handle)
    assert again["already_stopped"] is True and again["engine"] == "command"
    assert again["summary"].startswith(f"command engine {handle} already stopped (by stop_serve, ")
    assert again["uptime_s"] == first["uptime_s"] or abs(again["uptime_s"] - first["uptime_s"]) < 1
    gone = f"the command engine {handle} was already stopped \\(by stop_serve"
    with pytest.raises(ToolCallError, match=gone):
        await call(client, "serve_benchmark", handle=handle)
    listed = await call(client, "list_serves")
    assert listed["summary"] == f"0 engine(s) running; stopped earlier: {handle} (by stop_serve)"
    assert engine_processes() == []


def test_cli_launch_serve_says_the_engine_ends_with_the_command(echo_workspace):
    from typer.testing import CliRunner

    from infra_agent.server.cli import app

    arguments = json.dumps({"engine": "command", "args": command("ok")})
    result = CliRunner().invoke(
        app, ["call", "launch_serve", arguments, "-w", str(echo_workspace)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    note = "the engine lived only as long as this command and was stopped when it exited"
    assert note in result.stderr
    assert "infra-agent serve --http" in result.stderr
    assert engine_processes() == []  # what the note says: nothing outlives the command


@pytest.mark.anyio
async def test_the_first_engine_error_is_in_the_summary(client, echo_workspace):
    launched = await call(client, "launch_serve", engine="command", args=command("reject"))
    out = await call(
        client,
        "serve_benchmark",
        handle=launched["handle"],
        repeats=2,
        workload={"num_requests": 4, "input_len": 12, "output_len": 2, "max_concurrency": 2},
    )
    assert (out["metrics"]["completed"], out["metrics"]["failed"]) == (0, 4)
    assert out["first_error"].startswith("HTTP 400: ")
    assert "maximum context length is 8 tokens" in out["first_error"]
    assert out["target"] == (
        f"command engine {launched['handle']} (command {sys.executable} /workspace/echo_server.py "
        "{port} reject): 4 requests x 2 repeat(s), random prompts of 12 -> 2 tokens, closed loop, "
        "2 in flight, /v1/completions"
    )
    assert out["summary"].startswith(
        out["target"] + ": 0 ok / 4 failed per run (median of 2) (first error: HTTP 400: "
    )
    await call(client, "stop_serve", handle=launched["handle"])


@pytest.mark.anyio
async def test_an_inconclusive_criterion_says_why(client, echo_workspace):
    launched = await call(client, "launch_serve", engine="command", args=command("ok"))
    # a side compared with itself: the same interval on both sides always overlaps, so it stays open
    out = await call(
        client,
        "serve_benchmark",
        handle=launched["handle"],
        repeats=2,
        workload={"num_requests": 4, "input_len": 4, "output_len": 2, "rate": 50.0},
        criteria=["ttft_p50 <= ttft_p50"],
    )
    assert out["criteria"]["answer"] == "inconclusive"
    assert out["undecided"]
    assert out["undecided"][0].startswith("ttft_p50 <= ttft_p50: ttft_p50 spans ")
    assert "the medians sit on the threshold" in out["undecided"][0]
    assert (
        "Criteria: inconclusive (the repeats straddle a threshold) (ttft_p50 <= ttft_p50); "
        "ttft_p50 spans "
    ) in out["summary"]
    await call(client, "stop_serve", handle=launched["handle"])


@pytest.mark.anyio
async def test_a_launch_cancelled_while_the_engine_starts_leaves_nothing_running(
    client, echo_workspace
):
    """The client gives up on launch_serve while its engine is still starting (a sweep cancelled,
    an agent's timeout): the engine is stopped then, not at the server's exit."""
    import anyio

    hang = {"command": [sys.executable, "-c", "import time; print('loading'); time.sleep(600)"]}
    with anyio.move_on_after(3.0):
        await client.call_tool(
            "launch_serve", {"engine": "command", "args": hang, "ready_timeout_s": 120}
        )
    for _ in range(100):  # the cancellation unwinds in the server
        if not engine_processes() and not _sleepers():
            break
        await anyio.sleep(0.1)
    assert not _sleepers(), "the cancelled launch left its engine running"
    assert (await call(client, "list_serves"))["serves"] == []


def _sleepers() -> list[int]:
    """Host processes of the hanging engine above (its command line names the sleep)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"time.sleep(600)" in cmdline and os.fsencode(sys.executable) in cmdline:
            out.append(int(pid))
    return out


@pytest.mark.anyio
async def test_a_long_session_remembers_only_the_newest_stopped_engines(
    client, echo_workspace, monkeypatch
):
    """Engines.stopped (what a second stop of a handle is answered with) keeps the newest
    STOPPED_KEPT, and list_serves' summary names the newest STOPPED_SHOWN: a session that stops
    engines without end (sweep_serve's steps) keeps neither growing. Here kept 2, shown 1."""
    from infra_agent.serving import lifecycle
    from infra_agent.tools import list_serves

    monkeypatch.setattr(lifecycle, "STOPPED_KEPT", 2)
    monkeypatch.setattr(list_serves, "STOPPED_SHOWN", 1)
    handles = []
    for _ in range(3):
        launched = await call(client, "launch_serve", engine="command", args=command("ok"))
        handles.append(launched["handle"])
        await call(client, "stop_serve", handle=launched["handle"])
    oldest, older, newest = handles
    with pytest.raises(ToolCallError, match=f"no serving engine with handle '{oldest}'") as err:
        await call(client, "serve_benchmark", handle=oldest)
    assert "only the last 2 are remembered" in str(err.value)
    for handle in (older, newest):
        again = await call(client, "stop_serve", handle=handle)
        assert again["already_stopped"] is True, again
    listed = await call(client, "list_serves")
    assert listed["summary"] == (
        f"0 engine(s) running; stopped earlier: {newest} (by stop_serve) and 1 before them"
    )
    assert engine_processes() == []

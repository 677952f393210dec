"""profile(handle=) on a live built-in engine: the load of the last serve_benchmark on the handle,
where the call's time went, a thread table within physical bounds, and a window that is closed
however the call ends (a cancel mid-window leaves the engine profilable)."""

import asyncio
import os
import signal
from pathlib import Path

import pytest
from conftest import ToolCallError, call, processes_working_in

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKLOAD = {"num_requests": 8, "input_len": 40, "output_len": 4, "max_concurrency": 2, "warmup": 0}
TICK_MS = 10  # /proc's on-CPU counters move in 10 ms ticks


@pytest.fixture(scope="module")
async def engine_server(zoo_workspace):
    from infra_agent.server.app import build_server

    build_tiny_checkpoint(zoo_workspace / "tiny")
    server = build_server(zoo_workspace)
    yield server
    await server.aclose()


@pytest.fixture(scope="module")
async def engine_client(engine_server):
    from mcp import Client

    async with Client(engine_server) as client:
        yield client


async def test_the_load_is_the_last_benchmarks_and_the_thread_table_is_bounded(engine_client):
    c = engine_client
    handle = (await call(c, "launch_serve", engine="builtin", args={"model": "tiny"}))["handle"]
    bench = await call(c, "serve_benchmark", handle=handle, workload=WORKLOAD, repeats=1)
    out = await call(c, "profile", handle=handle, duration_s=1.0)
    load = out["load"]
    assert (load["concurrency"], load["input_len"], load["output_len"]) == (2, 40, 4), load
    assert bench["experiment_id"] in load["source"] and "2 requests in flight" in out["target"]
    mixed = await call(c, "profile", handle=handle, duration_s=1.0, load_output_len=6)
    assert (mixed["load"]["input_len"], mixed["load"]["output_len"]) == (40, 6)
    assert "load_output_len from these arguments" in mixed["load"]["source"]

    # the load's prompts and its generator's process are made before the window opens (load_setup)
    phases = ["attach", "load_setup", "start_profile", "load", "stop_profile", "read_window"]
    assert set(phases) | {"judge"} <= set(out["phases_ms"]), out["phases_ms"]
    window = out["window_ms"]
    for t in out["threads"]:
        if t["on_cpu_ms"] is not None:
            assert t["on_cpu_ms"] <= window + 2 * TICK_MS, (t, window)
    shares = [t["gil_held_fraction"] or 0 for t in out["threads"]]
    assert sum(shares) <= 1.1, out["threads"]  # one holder at a time, within sampling error
    print(
        "threads:",
        [
            (t["name"], t["on_cpu_ms"], t["gil_held_fraction"], t["state_fractions"])
            for t in out["threads"]
        ],
        "phases:",
        out["phases_ms"],
    )
    await call(c, "stop_serve", handle=handle)


async def test_a_cancelled_window_is_closed_and_the_next_profile_runs(engine_server, engine_client):
    c = engine_client
    launched = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    handle = launched["handle"]
    # Cancelled half a second after its window opened (the engine log's second profiler_start:
    # the warm-up's, then the window's), not at a fixed time into the call: under two CPU hogs the
    # window had not opened 2 s in, so the cancel never met an open window. Not longer: a 2.5 s
    # cancel gave a 4 s window whose export the engine did not survive in two CI runs on a faster
    # host, and at 5 s the window grew to ~9 s (the load runs until /stop_profile lands) and its
    # export took ~13 GB (torch.profiler held 5.7 GB after the stop, the trace file 382 MB), past
    # the engine's 6.3 GB memory ceiling (docs/profile.md: what a window costs in memory).
    log = Path(launched["socket"]).parent / "engine.log"
    profiling = asyncio.ensure_future(
        engine_server.call_tool(
            "profile", {"handle": handle, "duration_s": 20.0, "load_concurrency": 1}
        )
    )
    deadline = asyncio.get_running_loop().time() + 300
    while log.read_text().count("profiler_start") < 2:  # the warm-up's and the window's
        assert not profiling.done(), "the profile call ended before its window opened"
        assert asyncio.get_running_loop().time() < deadline, "the window never opened"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    profiling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await profiling
    # the cancelled window was closed; its export goes on in the engine (tens of seconds on a busy
    # host) and this call waits for it within its timeout_s, then profiles
    out = await call(c, "profile", handle=handle, duration_s=0.5, load_concurrency=1, timeout_s=300)
    assert out["window_ms"] > 0  # not "a profile is already running"
    await call(c, "stop_serve", handle=handle)


async def test_an_engine_that_died_is_named_with_its_cause(engine_client):
    """Not "the engine did not answer (ConnectError)": the engine died, how, and what to do."""
    c = engine_client
    launched = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    folder = Path(launched["socket"]).resolve().parent
    engines = [
        pid for pid in processes_working_in(folder.name) if b"serving.engine" in _cmdline(pid)
    ]
    assert len(engines) == 1, engines
    os.kill(engines[0], signal.SIGKILL)
    with pytest.raises(ToolCallError) as err:
        await call(c, "profile", handle=launched["handle"], duration_s=0.5, load_concurrency=1)
    assert "died before it answered /start_profile (killed by signal 9)" in str(err.value), (
        err.value
    )
    assert "Launch it again" in str(err.value)
    await call(c, "stop_serve", handle=launched["handle"])


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def test_an_engine_measured_as_a_baseline_is_profiled_under_that_workload(engine_client):
    """A handle benchmarked only as baseline_handle= received the workload too (issue 36, item 4):
    profile(handle=) uses it, not the defaults."""
    c = engine_client
    this = (await call(c, "launch_serve", engine="builtin", args={"model": "tiny"}))["handle"]
    launched = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    base = launched["handle"]
    work = WORKLOAD | {"input_len": 24, "output_len": 3, "max_concurrency": 3}
    bench = await call(
        c, "serve_benchmark", handle=this, baseline_handle=base, workload=work, repeats=1
    )
    out = await call(c, "profile", handle=base, duration_s=0.5)
    load = out["load"]
    assert (load["concurrency"], load["input_len"], load["output_len"]) == (3, 24, 3), load
    assert bench["experiment_id"] in load["source"] and "baseline_handle" in load["source"]
    # the engine's window and trace files are kept once: as the artifacts, not also in its folder
    profiles = Path(launched["socket"]).parent / "profiles"
    assert not list(profiles.glob("*.json*")), list(profiles.iterdir())
    assert any(uri.endswith("/engine-torch-trace.json") for uri in out["artifacts"]), out[
        "artifacts"
    ]
    await call(c, "stop_serve", handle=this)
    await call(c, "stop_serve", handle=base)

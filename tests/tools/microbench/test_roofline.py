"""Roofline arithmetic: percent of ceilings, bound class, the physical-floor flag."""

import pytest

from infra_agent.tools.microbench.roofline import analyse, ceilings_for

PEAKS = {
    "copy_gbps": 100.0,
    "cache_copy_gbps": 400.0,
    "matmul_tflops": {"float32": 10.0, "bfloat16": 40.0},
    "source": "measured",
}


def test_memory_bound_kernel_near_bandwidth():
    c = ceilings_for(PEAKS, "float32")
    r = analyse(12.5, flops=1e6, bytes_moved=1e9, ceilings=c)  # 1 GB in 12.5 ms = 80 GB/s
    assert r.bound == "memory"
    assert r.achieved_gbps == pytest.approx(80.0)
    assert r.pct_of_peak_bandwidth == pytest.approx(80.0)
    assert r.roofline_ms == pytest.approx(10.0)
    assert not r.is_impossible


def test_compute_bound_kernel_uses_the_dtype_rate():
    c = ceilings_for(PEAKS, "bfloat16")
    r = analyse(50.0, flops=1e12, bytes_moved=1e8, ceilings=c)  # 20 TFLOP/s of 40
    assert r.bound == "compute"
    assert r.pct_of_peak_flops == pytest.approx(50.0)
    assert r.achieved_gflops == pytest.approx(20_000.0)


def test_far_from_both_ceilings_is_latency_bound():
    r = analyse(1.0, flops=1e3, bytes_moved=1e4, ceilings=ceilings_for(PEAKS, "float32"))
    assert r.bound == "latency"
    assert "overhead" in r.explanation


def test_time_under_the_physical_floor_is_impossible():
    c = ceilings_for(PEAKS, "float32")
    # 1 GB cannot move in 0.1 ms even at the 400 GB/s cache rate (floor 2.5 ms)
    r = analyse(0.1, flops=1e6, bytes_moved=1e9, ceilings=c)
    assert r.is_impossible
    assert r.floor_ms == pytest.approx(2.5)
    assert "IMPOSSIBLE" in r.explanation


def test_cache_speed_is_possible_but_beyond_dram():
    # 1 GB in 4 ms = 250 GB/s: above DRAM, below the cache rate: fast but possible
    r = analyse(4.0, flops=0, bytes_moved=1e9, ceilings=ceilings_for(PEAKS, "float32"))
    assert not r.is_impossible and r.pct_of_peak_bandwidth > 100


def test_unknown_dtype_falls_back_to_the_best_measured_rate():
    assert ceilings_for(PEAKS, "float16").flops_tflops == 40.0


@pytest.mark.anyio
async def test_ceilings_measured_on_another_device_are_not_used(client, server):
    """On a cluster whose nodes differ, the peaks job a microbench starts may land on another
    kind of device than the microbench's own job. Those ceilings are cached for the device they
    were measured on and never used for this one: the device's datasheet stands in where there
    is one, else no roofline. Here the peaks job runs on this CPU host for a call whose job
    reported an H200 (as a node of a cluster would), then an unknown GPU."""
    import json

    from conftest import call

    from infra_agent.server.context import CallContext
    from infra_agent.tools.common import peaks

    eid = (await call(client, "list_kernels"))["experiment_id"]
    ctx = CallContext(server.state, eid)
    gpu = {"device": "cuda", "capability": "9.0", "memory_bytes": 150_000_000_000, "cuda": "12.8"}
    ceilings, note = await peaks.device_peaks(ctx, {**gpu, "name": "NVIDIA H200"})
    assert note.startswith("the ceilings job ran on another device"), note
    assert note.endswith("using datasheet numbers"), note
    assert ceilings is not None and ceilings["copy_gbps"] == 4800.0, ceilings
    assert ceilings["source"].startswith("datasheet (h200"), ceilings
    # what was measured is cached under the device it ran on (this host), and answers for it
    (measured,) = json.loads((server.state.workspace.state_dir / "peaks.json").read_text()).values()
    assert measured["device"]["device"] == "cpu" and measured["source"] == "measured"
    here, note_here = await peaks.device_peaks(ctx, measured["device"])
    assert here == measured and note_here.endswith("cached"), note_here

    unknown, note = await peaks.device_peaks(ctx, {**gpu, "name": "NVIDIA X1"})
    assert unknown is None and note.endswith(
        "no roofline this time (a later call may measure this device)"
    )

"""profile(handle=) on the real vLLM (its CPU build): the window through its /start_profile and
/stop_profile, its own torch traces read into the answer, its three processes watched from the
host (/proc and py-spy). One engine (~1-2 minutes to start on 2 cores)."""

from __future__ import annotations

import os

import pytest
from conftest import call
from serve_helpers import vllm_client, vllm_workspace  # noqa: F401  (the fixtures)

pytestmark = pytest.mark.slow

PROCESSES = {"api_server", "engine_core", "worker"}


@pytest.mark.anyio
async def test_profile_a_vllm_engine_under_load(vllm_client, vllm_workspace):
    c = vllm_client
    eng = await call(
        c,
        "launch_serve",
        engine="vllm",
        args={"model": "tiny32", "extra_args": ["--enforce-eager"]},
        ready_timeout_s=400,
    )
    try:
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
    finally:
        await call(c, "stop_serve", handle=eng["handle"])
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

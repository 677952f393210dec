"""Other calls answer during a large benchmark (issue 36, item 1): the load generator runs in a
process of its own, and the server's loop only relays its progress. Before, it shared the
server's loop: a `list_kernels` poller waited up to 8 s during 5,000 requests (p50 28 ms), 3.5 s
during 2,000 of 4 -> 2 tokens, and the prompts were built on the loop too (2.7 s for 2,000).

The witnesses hold on a loaded host, where the poller's wall-clock latencies also measure how
long the host let this process wait for a CPU (printed, not asserted): the requests were sent
by child processes of the server, and the server's loop never ran for long without returning to
wait for events. That is measured in CPU time, which a starved process does not accumulate: a
heartbeat task on the loop reads this thread's CPU clock at every beat; the most CPU between two
beats is the longest any other call could have waited for the loop on a host with a CPU free
for it. It must stay under the 0.5 s the issue allows (before the fix: seconds).

The server here is new, but its process is a test worker that may have run hundreds of tests,
and a full garbage collection on the loop's thread scans all they left. The one failure here
read 0.64 s of CPU between two beats, beside two CPU hogs, late in an xdist worker (idle and
alone the longest is ~0.03 s); such a collection is the suspect, not proven. So what the worker
holds is frozen before the benchmark (gc.freeze: a collection then scans only what came after,
as in a server process of its own), and the collections during it are named in the message."""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
from pathlib import Path

import pytest
from conftest import call, process_gone
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

from infra_agent.serving.loadgen.process import generator_pids

pytestmark = pytest.mark.slow

N = 1000
POLL_GAP_S = 0.05


def cpu_s(pid: int) -> float | None:
    """utime + stime of a process, s; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def poll(c, until: asyncio.Future | None, count: int = 0) -> list[float]:
    """list_kernels latencies, s: `count` polls, or until `until` is done."""
    out: list[float] = []
    while (until is not None and not until.done()) or (until is None and len(out) < count):
        t0 = time.perf_counter()
        await call(c, "list_kernels")
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(POLL_GAP_S)
    return out


@pytest.fixture
def frozen_heap():
    """What the test worker held before this test, out of the garbage collector's reach; the
    collections that ran meanwhile: (generation, CPU s of this thread)."""
    collections: list[tuple[int, float]] = []
    started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            collections.append((info["generation"], time.thread_time() - started[0]))

    gc.collect()
    gc.freeze()
    gc.callbacks.append(on_gc)
    try:
        yield collections
    finally:
        gc.callbacks.remove(on_gc)
        gc.unfreeze()


@pytest.mark.anyio
async def test_other_calls_answer_during_a_large_benchmark(frozen_heap, serve_client):
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    control = await poll(c, None, count=40)

    bench = asyncio.ensure_future(
        call(
            c,
            "serve_benchmark",
            handle=eng["handle"],
            workload={"num_requests": N, "input_len": 4, "output_len": 2, "warmup": 0},
            repeats=1,
            time_budget_s=3000,
        )
    )
    generators: dict[int, float] = {}  # pid -> its CPU time, s, as last read

    async def watch() -> None:
        while not bench.done():
            for pid in generator_pids(os.getpid()):
                if (used := cpu_s(pid)) is not None:
                    generators[pid] = used
            await asyncio.sleep(0.02)

    bursts: list[float] = []  # this thread's CPU seconds between consecutive heartbeats

    async def heartbeat() -> None:
        last = time.thread_time()
        while not bench.done():
            await asyncio.sleep(0.01)
            now = time.thread_time()
            bursts.append(now - last)
            last = now

    watcher = asyncio.ensure_future(watch())
    beats = asyncio.ensure_future(heartbeat())
    during = await poll(c, bench)
    await watcher
    await beats
    out = await bench
    m = out["metrics"]
    # (requests that fail are item 2's business: test_serve_many_requests.py)
    assert m["completed"] + m["failed"] == N and m["completed"] > N // 2, out["repeats"][0]

    # the requests were sent by child processes of the server (the cost probe's and the run's)
    assert generators and os.getpid() not in generators
    print(
        f"poller idle: p50 {statistics.median(control):.3f} s max {max(control):.3f} s; during "
        f"{len(during)} polls: p50 {statistics.median(during):.3f} s max {max(during):.3f} s; "
        f"loop's longest CPU burst {max(bursts):.3f} s over {len(bursts)} beats; generators' "
        f"CPU {sum(generators.values()):.2f} s"
    )
    # the loop only relayed: it never held the CPU for long without waiting for events
    slowest_gc = sorted(frozen_heap, key=lambda g: g[1])[-3:]
    assert max(bursts) < 0.5, (sorted(bursts)[-5:], f"slowest collections {slowest_gc}")
    await call(c, "stop_serve", handle=eng["handle"])


@pytest.mark.anyio
async def test_a_cancelled_benchmark_leaves_no_load_generator(serve_client):
    """The client cancels serve_benchmark mid-run: its load generator's process ends with it."""
    import anyio

    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    seen: list[int] = []

    async def on_progress(progress, total, message):
        if (message or "").startswith("repeat 1/1:") and not seen:
            seen.extend(generator_pids(os.getpid()))
            scope.cancel()  # the client gives up mid-run

    with anyio.CancelScope() as scope:
        await c.call_tool(
            "serve_benchmark",
            {
                "handle": eng["handle"],
                "workload": {"num_requests": 400, "input_len": 4, "output_len": 8, "warmup": 0},
                "repeats": 1,
                "time_budget_s": 3000,
            },
            progress_callback=on_progress,
        )
    assert seen, "no load generator ran"
    assert all(process_gone(pid, within_s=30) for pid in seen), seen
    assert not generator_pids(os.getpid())
    assert (await call(c, "list_serves"))["serves"][0]["alive"]  # the engine is fine
    await call(c, "stop_serve", handle=eng["handle"])

"""Run a benchmark: send the requests on schedule, collect one record each.

Warm-up requests go first, one at a time, and are excluded from the metrics. Then the
measured requests follow `Arrivals`: open loop (scheduled times, an optional cap on
requests in flight, timers from the scheduled time) or closed loop (a fixed number in
flight). `progress(done, total, message)` is awaited as requests finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence

from .arrivals import Arrivals
from .client import Endpoint, stream_one
from .datasets import BenchRequest, Tokenizer
from .metrics import Metrics, RequestRecord, compute

Progress = Callable[[float, float | None, str], Awaitable[None]]
SPIN_S = 0.0015  # default: spin this long before each scheduled send (asyncio timers wake up to 1 ms late)
# Requests in flight at most, whatever the arrivals ask: httpx's pool scans every waiting
# request on each change, so 5,000 at once kept the loop busy for 15 minutes (issue 27; the
# loop was then the MCP server's, and no other call answered).
# Above the ceiling requests wait their turn, and their timers still start at the scheduled
# time, so the queueing shows in TTFT instead of being hidden.
MAX_IN_FLIGHT = 256


@dataclass
class RunResult:
    records: list[RequestRecord]
    duration_s: float  # first scheduled send to last chunk of the measured requests
    metrics: Metrics
    # Seconds the load generator's thread was ready to run but waited for a CPU, over the
    # measured requests (the kernel's own account, /proc/thread-self/schedstat; None where the
    # kernel keeps none). Every timestamp it took late by that wait is late in the metrics.
    client_cpu_wait_s: float | None = None
    generator_pid: int = field(default_factory=os.getpid)  # the process that sent the requests


async def run_benchmark(
    ep: Endpoint,
    requests: list[BenchRequest],
    arrivals: Arrivals,
    *,
    warmup: Sequence[BenchRequest] = (),
    tokenizer: Tokenizer | None = None,
    slos_ms: dict[str, float] | None = None,
    timeout_s: float = 300.0,
    progress: Progress | None = None,
    spin_s: float = SPIN_S,
    send_for_s: float | None = None,
) -> RunResult:
    """`warmup`: requests sent first, one at a time, excluded from the metrics. Give prompts the
    measured requests do not share: a measured request whose prompt a warm-up sent finds it in
    the engine's prefix cache (a fast TTFT, and a hit rate that reads as an earlier call's).

    `send_for_s` (closed loop only): instead of sending each request once, keep sending them
    in turn, `max_concurrency` in flight, until that many seconds have passed (those in flight
    then finish): a steady load for a fixed time, as a profiling window needs.

    `spin_s`: how long before each scheduled send the client stops sleeping and polls the loop.
    The default keeps the client idle between sends (the CPU stays free for an engine on the same
    host). A value above the mean gap keeps the client busy (a whole core) like a spinning loop:
    TTFT p50 was 1.2-1.7 ms lower at 50 req/s on a shared 2-core host, because an idle client is
    woken on a cold core or has the server scheduled onto its own (bench/loadgen_overhead.py)."""
    if not requests:
        raise ValueError("no requests to send")
    if not spin_s >= 0:
        raise ValueError(f"spin_s must be >= 0 seconds (default {SPIN_S}), got {spin_s}")
    if send_for_s is not None and not arrivals.is_closed_loop:
        raise ValueError(
            "send_for_s needs a closed loop (Arrivals(max_concurrency=N) without a rate)"
        )
    width = min(arrivals.max_concurrency or len(requests), MAX_IN_FLIGHT)
    async with ep.client(max_connections=max(width, 1), timeout_s=timeout_s) as client:
        for i, req in enumerate(warmup):
            rec = RequestRecord(index=-1 - i, scheduled_s=time.perf_counter(), is_warmup=True)
            await stream_one(client, ep, req, rec, tokenizer)
        waited_before = cpu_wait_s()
        if arrivals.is_closed_loop:
            records, t0 = await _closed_loop(
                client, ep, requests, width, tokenizer, progress, send_for_s
            )
        else:
            records, t0 = await _open_loop(
                client, ep, requests, arrivals, width, tokenizer, progress, spin_s
            )
        waited_after = cpu_wait_s()
    ends = [r.last_chunk_s for r in records if r.ok]
    duration = (max(ends) - t0) if ends else time.perf_counter() - t0
    waited = (
        waited_after - waited_before
        if waited_before is not None and waited_after is not None
        else None
    )
    return RunResult(records, duration, compute(records, duration, slos_ms), waited)


def cpu_wait_s() -> float | None:
    """Seconds this thread has spent runnable but not running (on a run queue) since it
    started: the second field of /proc/thread-self/schedstat, ns. None without schedstats."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class _Counter:
    def __init__(self, total: int | None, progress: Progress | None):
        self.done, self.total, self.progress = 0, total, progress

    async def tick(self, rec: RequestRecord) -> None:
        self.done += 1
        if self.progress is not None:
            state = "failed" if rec.error else "ok"
            await self.progress(
                self.done, self.total, f"request {self.done}/{self.total or '?'} {state}"
            )


async def _open_loop(
    client, ep, requests, arrivals: Arrivals, width: int, tokenizer, progress, spin_s: float
):
    sem = asyncio.Semaphore(width) if width < len(requests) else None
    counter = _Counter(len(requests), progress)
    t0 = time.perf_counter() + 0.01  # a moment to set up before the first send
    records = [
        RequestRecord(index=i, scheduled_s=t0 + off)
        for i, off in enumerate(arrivals.offsets_s(len(requests)))
    ]

    async def one(req: BenchRequest, rec: RequestRecord) -> None:
        if sem is None:
            await stream_one(client, ep, req, rec, tokenizer)
        else:
            async with sem:
                await stream_one(client, ep, req, rec, tokenizer)
        await counter.tick(rec)

    # One dispatcher waits for each send time in turn and starts that request's task then: only
    # one coroutine ever sleeps or spins, however many requests are scheduled close together.
    tasks: list[asyncio.Task] = []
    try:
        for req, rec in zip(requests, records, strict=True):
            await sleep_until(rec.scheduled_s, spin_s)
            tasks.append(asyncio.create_task(one(req, rec)))
        await asyncio.gather(*tasks)
    finally:  # cancelled or failed: no request outlives the run
        for task in tasks:
            task.cancel()
    return records, t0


async def sleep_until(t: float, spin_s: float = SPIN_S) -> None:
    """Wake at `t` within a few microseconds. asyncio's timers wake up to 1 ms late (epoll
    rounds its timeout up to a millisecond), and every latency starts at the scheduled
    time, so the last `spin_s` seconds are spent yielding to the loop instead (other
    requests' chunks are still read and timestamped meanwhile)."""
    while (left := t - time.perf_counter()) > 0:
        await asyncio.sleep(left - spin_s if left > spin_s + 0.0005 else 0)


async def _closed_loop(
    client, ep, requests, width: int, tokenizer, progress, send_for_s: float | None
):
    """Each of `width` workers sends the next request as soon as its last one ends: every request
    once, or (send_for_s) in turn until the time is up."""
    counter = _Counter(len(requests) if send_for_s is None else None, progress)
    records: list[RequestRecord] = []
    t0 = time.perf_counter()
    until = t0 + send_for_s if send_for_s is not None else None

    def next_index() -> int | None:
        if until is None:
            return len(records) if len(records) < len(requests) else None
        return len(records) if time.perf_counter() < until else None

    async def worker() -> None:
        while (i := next_index()) is not None:
            rec = RequestRecord(index=i, scheduled_s=time.perf_counter())
            records.append(rec)
            await stream_one(client, ep, requests[i % len(requests)], rec, tokenizer)
            await counter.tick(rec)

    await asyncio.gather(
        *(worker() for _ in range(width if until is not None else min(width, len(requests))))
    )
    return records, t0


@contextlib.contextmanager
def no_gc_pauses():
    """Around a timed run: a full collection of a big heap (the MCP server's, when the load
    generator shared its process; a Ray worker's) takes hundreds of ms: one landing mid-run
    stalls every request in flight and reads as engine latency (measured: a 459 ms gen-2 pause
    in a 2 s run). So the heap as it is is frozen out of collection and the collector is off
    while requests are timed, as timeit does; the garbage of a run is collected at the start of
    the next one (or by the collector, back on). The generator's own process (process.py) runs
    under it from start to end."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()

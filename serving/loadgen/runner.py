"""Run a benchmark: send the requests on schedule, collect one record each.

Warm-up requests go first, one at a time, and are excluded from the metrics. Then the
measured requests follow `Arrivals`: open loop (scheduled times, an optional cap on
requests in flight, timers from the scheduled time) or closed loop (a fixed number in
flight). `progress(done, total, message)` is awaited as requests finish.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from .arrivals import Arrivals
from .client import Endpoint, stream_one
from .datasets import BenchRequest, Tokenizer
from .metrics import Metrics, RequestRecord, compute

Progress = Callable[[float, float | None, str], Awaitable[None]]


@dataclass
class RunResult:
    records: list[RequestRecord]
    duration_s: float  # first scheduled send to last chunk of the measured requests
    metrics: Metrics


async def run_benchmark(ep: Endpoint, requests: list[BenchRequest], arrivals: Arrivals, *, warmup: int = 0,
                        tokenizer: Tokenizer | None = None, slos_ms: dict[str, float] | None = None,
                        timeout_s: float = 300.0, progress: Progress | None = None) -> RunResult:
    if not requests:
        raise ValueError("no requests to send")
    width = arrivals.max_concurrency or len(requests)
    async with ep.client(max_connections=max(width, 1), timeout_s=timeout_s) as client:
        for i in range(warmup):
            rec = RequestRecord(index=-1 - i, scheduled_s=time.perf_counter(), is_warmup=True)
            await stream_one(client, ep, requests[i % len(requests)], rec, tokenizer)
        if arrivals.is_closed_loop:
            records, t0 = await _closed_loop(client, ep, requests, arrivals.max_concurrency, tokenizer, progress)
        else:
            records, t0 = await _open_loop(client, ep, requests, arrivals, tokenizer, progress)
    ends = [r.last_chunk_s for r in records if r.ok]
    duration = (max(ends) - t0) if ends else time.perf_counter() - t0
    return RunResult(records, duration, compute(records, duration, slos_ms))


class _Counter:
    def __init__(self, total: int, progress: Progress | None):
        self.done, self.total, self.progress = 0, total, progress

    async def tick(self, rec: RequestRecord) -> None:
        self.done += 1
        if self.progress is not None:
            state = "failed" if rec.error else "ok"
            await self.progress(self.done, self.total, f"request {self.done}/{self.total} {state}")


async def _open_loop(client, ep, requests, arrivals: Arrivals, tokenizer, progress):
    sem = asyncio.Semaphore(arrivals.max_concurrency) if arrivals.max_concurrency else None
    counter = _Counter(len(requests), progress)
    t0 = time.perf_counter() + 0.01  # a moment to create every task before the first send
    records = [RequestRecord(index=i, scheduled_s=t0 + off) for i, off in enumerate(arrivals.offsets_s(len(requests)))]

    async def one(req: BenchRequest, rec: RequestRecord) -> None:
        await _sleep_until(rec.scheduled_s)
        if sem is None:
            await stream_one(client, ep, req, rec, tokenizer)
        else:
            async with sem:
                await stream_one(client, ep, req, rec, tokenizer)
        await counter.tick(rec)

    await asyncio.gather(*(one(q, r) for q, r in zip(requests, records)))
    return records, t0


async def _sleep_until(t: float) -> None:
    """Wake at `t` within a few microseconds. asyncio's timers wake up to 1 ms late (epoll
    rounds its timeout up to a millisecond), and every latency starts at the scheduled
    time, so the last 1.5 ms are spent yielding to the loop instead (other requests'
    chunks are still read and timestamped meanwhile)."""
    while (left := t - time.perf_counter()) > 0:
        await asyncio.sleep(left - 0.0015 if left > 0.002 else 0)


async def _closed_loop(client, ep, requests, width: int, tokenizer, progress):
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(requests)):
        queue.put_nowait(i)
    counter = _Counter(len(requests), progress)
    records: list[RequestRecord | None] = [None] * len(requests)
    t0 = time.perf_counter()

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            rec = records[i] = RequestRecord(index=i, scheduled_s=time.perf_counter())
            await stream_one(client, ep, requests[i], rec, tokenizer)
            await counter.tick(rec)

    await asyncio.gather(*(worker() for _ in range(min(width, len(requests)))))
    return [r for r in records if r is not None], t0
